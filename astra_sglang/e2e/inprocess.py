"""The parent side of ``e2e --in-process``: one forward process runs every arm (``inprocess_child.py`` says how),
and its arm-runs are read back as the rounds of an e2e run, so the statistics, the placebo rule, the served-call
checks and the report are the cross-process run's own.

The folder keeps ``inprocess/``: the process's stdout/stderr, the plugin's status records, ``arms.jsonl`` (one
line per arm-run, written as it goes) and ``done.json`` once the process finished. A run cut before that is run
again whole (one process; its model load is the fixed cost); a finished one is reported, not rerun.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from astra_sglang.contract.base import write_atomic
from astra_sglang.e2e.forecast import Forecasts
from astra_sglang.e2e.inprocess_child import COUNTED, ENV_DEADLINE, ENV_OUT, ENV_ROUNDS
from astra_sglang.e2e.runner import (
    REPORT_FILE,
    ArmRun,
    E2EConfig,
    E2EReport,
    PatchCount,
    ShapeResult,
    build_report,
    launch,
    prepare_folder,
    why_it_died,
)
from astra_sglang.errors import AstraError
from astra_sglang.patches.env import ENV_SELECT
from astra_sglang.patches.status_file import ENV_STATUS_DIR
from astra_sglang.profile.chunked_prefill import child_env

FOLDER = "inprocess"
END_MARGIN_S = 30.0  # after its last arm-run the process still leaves one_batch and tears SGLang down
LINES = "arms.jsonl"
DONE = "done.json"


def runs_from_lines(path: Path, command: list[str], env: dict[str, str]) -> list[ArmRun]:
    """Each of the child's lines (one arm-run: one round, arm and batch shape) as one ArmRun, so what the checks
    say of an arm-run (its recapture, its calls) is said of that arm-run, not hidden in a sum over shapes."""
    runs: list[ArmRun] = []
    for raw in path.read_text().splitlines() if path.is_file() else []:
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
            result = line["result"]
            shape = ShapeResult(**{k: result.get(k) for k in ShapeResult.model_fields if k in result})
            patches = [PatchCount(patch_id=str(p["patch_id"]), state=str(p.get("state", "")),
                                  **{k: int(p.get(k, 0)) for k in COUNTED}) for p in line.get("patches", [])]
            runs.append(ArmRun(round=int(line["round"]), arm=str(line["arm"]), position=int(line.get("position", 0)),
                               command=command, env=env, seconds=float(line.get("seconds", 0.0)), results=[shape],
                               patches=patches, patches_source="in-process counters",
                               graphs=bool(line.get("graphs"))))
        except (ValueError, KeyError, TypeError) as e:
            raise AstraError(f"{path}: unreadable arm-run line ({type(e).__name__}: {e})") from None
    return runs


def _command(cfg: E2EConfig, folder: Path) -> list[str]:
    return [*cfg.forward, *cfg.one_batch_args, "--result-filename", str(folder / "result.jsonl")]


def _report(cfg: E2EConfig, out: Path, runs: list[ArmRun], stopped: str) -> E2EReport:
    """The cross-process run's report from the arm-runs, written to the folder."""
    report = build_report(cfg, runs, out)
    asked = "" if report.rounds_done >= cfg.rounds else (
        f" ({cfg.rounds} asked: --timeout {cfg.timeout_s:.0f} s, shared among the batch shapes, held fewer)")
    report.stopped = stopped.format(rounds=report.rounds_done, asked=asked)
    write_atomic(out / REPORT_FILE, report.model_dump_json(indent=1) + "\n")
    return report


def run_in_process(cfg: E2EConfig, out: Path, progress: Callable[[str], None] | None = None,
                   forecasts: Forecasts | None = None) -> E2EReport:
    say = progress or (lambda msg: None)
    out = Path(out)
    prepare_folder(out, cfg, forecasts)
    folder = out / FOLDER
    lines = folder / LINES
    cmd = _command(cfg, folder)
    extra = {ENV_SELECT: cfg.patches, ENV_STATUS_DIR: str(folder / "status"), ENV_ROUNDS: str(cfg.rounds),
             ENV_OUT: str(lines), **child_env(cfg.prefill_chunk_tokens)}
    if (folder / DONE).is_file():
        say(f"{folder} finished before: reported, not rerun")
    else:
        if folder.exists():
            shutil.rmtree(folder)  # a cut run: its arm-runs came from a process that did not finish
        folder.mkdir(parents=True)
        say(f"one process, {cfg.rounds} rounds of arms A B C (rotated), decode graphs recaptured before each "
            f"arm-run; folder {folder}")
        # the batch shapes share what the process's limit leaves (inprocess_child.InProcessAB), with time to end
        extra[ENV_DEADLINE] = f"{time.time() + cfg.timeout_s - min(END_MARGIN_S, cfg.timeout_s / 4):.3f}"
        rc, seconds = launch(folder, cmd, extra, cfg.timeout_s, "the in-process forward")
        if rc != 0:
            raise AstraError(f"the in-process forward exited with {rc} ({why_it_died(folder / 'stderr.log')}); "
                             f"see {folder / 'stderr.log'}")
        write_atomic(folder / DONE, json.dumps({"seconds": seconds}) + "\n")
    runs = runs_from_lines(lines, cmd, extra)
    if not runs:
        raise AstraError(f"the in-process forward wrote no arm-runs to {lines}; see {folder / 'stderr.log'}")
    return _report(cfg, out, runs, "in-process: {rounds} rounds of arm-runs in one process{asked}")


def report_in_process(out: Path) -> E2EReport:
    """``--report-only`` for an in-process run: its arm-runs read again, nothing run."""
    from astra_sglang.e2e.runner import CONFIG_FILE, read_config

    out = Path(out)
    cfg = read_config(out / CONFIG_FILE)
    folder = out / FOLDER
    runs = runs_from_lines(folder / LINES, _command(cfg, folder), {})
    if not runs:
        raise AstraError(f"{out}: no arm-runs in {folder / LINES}")
    done = "finished" if (folder / DONE).is_file() else "cut before it finished"
    return _report(cfg, out, runs, "report only: in-process, {rounds} rounds of arm-runs read (the process "
                   + done + ")")
