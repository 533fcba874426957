"""The orchestration of ``e2e``: the same forward in a fresh process per arm per round, written down as it goes.

Arms: A = patches off, B = patches on (``--patches``), C = placebo (B's hooks installed, SGLang's original serving
every call, ``ASTRA_SGLANG_PLACEBO=1``). A round runs each arm once, in an order rotated every round (A B C, B C A,
C A B), so a slow drift of the GPU (clocks, temperature) falls on every arm alike rather than always on the last.
Each process is fresh: one process's allocator, autotuning and clocks are one sample of the noise that dominates.

Before round 1, ``warmup_processes`` processes run arm A's command and are thrown out of the statistics: the
first process on a machine compiles Triton/JIT kernels for new shapes inside its measured steps (on the H200, round
1's A took 81 s against 30-47 s and measured bs 32 prefill at 2028 ms against 779-791 ms). They are kept under
``r000/W<n>/`` for the record.

The run folder (``--out``) keeps everything: ``e2e.json`` (what is measured), ``rNNN/<arm>/`` per process (its
command's one_batch JSONL, stdout, stderr, the plugin's status records, and ``arm.json`` written last, which marks
the process as done), ``report.json`` after every round. A killed run keeps its finished processes (warm-ups
included); the same command with the same ``--out`` reruns only what is missing and goes on, and ``report_only``
recomputes the report from them without running anything.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from astra_sglang.contract.base import Model, write_atomic
from astra_sglang.e2e.forecast import (
    FORECAST_FILE,
    MISS,
    ForecastCheck,
    Forecasts,
    check,
    read_forecasts,
    shape_label,
    write_forecasts,
)
from astra_sglang.e2e.stats import MetricSummary, Verdict, fewest_processes, overall, summarize
from astra_sglang.errors import AstraError
from astra_sglang.patches.env import ALL_VALUES, ENV_PLACEBO, ENV_SELECT
from astra_sglang.patches.status_file import ENV_STATUS_DIR
from astra_sglang.profile import gpu_state
from astra_sglang.profile.chunked_prefill import ENV_PREFILL_TOKENS, child_env
from astra_sglang.profile.gpu_state import GpuState

ARMS = ("A", "B", "C")
ARM_NAMES = {"A": "patches off", "B": "patches on", "C": "placebo"}
CONFIG_FILE = "e2e.json"
REPORT_FILE = "report.json"
PLOT_FILE = "e2e.png"
ARM_FILE = "arm.json"
STATUS_LINE = "ASTRA-PATCHES "
# SGLang's one_batch after load_plugins(), from the installed package: a pip install has it, not only a checkout
DEFAULT_FORWARD_MODULE = "astra_sglang.profile.one_batch_child"
INPROCESS_MODULE = "astra_sglang.e2e.inprocess_child"
OWN_ARGS = ("--result-filename",)  # one_batch arguments e2e sets itself


class E2EConfig(Model):
    forward: list[str] = Field(description="the command prefix of one process, before the one_batch arguments")
    one_batch_args: list[str]
    patches: str = "all"
    rounds: int = Field(default=6, ge=2, description="rounds always run")
    max_rounds: int = Field(default=12, ge=2, description="rounds at most, while the B/A interval is too wide")
    target_halfwidth: float = Field(default=0.01, gt=0, description="stop once every decode B/A half-width is below")
    timeout_s: float = Field(default=3600.0, gt=0, description="one process's limit")
    seed: int = 0
    warmup_processes: int = Field(default=1, ge=0, description="processes of arm A's command before round 1, "
                                                                "not in the statistics (cold Triton/JIT caches)")
    in_process: bool = Field(default=False, description="the arms inside one process, switched by graph "
                                                        "recapture (e2e/inprocess_child.py), not one process each")
    prefill_chunk_tokens: int = Field(default=0, ge=0, description="one_batch's prefill in groups of requests of at "
                                      "most this many tokens, merged into one decode batch "
                                      "(profile/chunked_prefill.py); 0: the whole batch in one forward, one_batch's way")

    @property
    def sample_unit(self) -> str:
        """What one sample of a ratio is: a process, or an arm-run inside the one process of an in-process run."""
        return "arm-runs" if self.in_process else "processes"

    def identity(self) -> dict[str, Any]:
        """What a resumed run must share with the folder's: the measurement itself, not how long to go on."""
        return {"forward": self.forward, "one_batch_args": self.one_batch_args, "patches": self.patches,
                "in_process": self.in_process, "prefill_chunk_tokens": self.prefill_chunk_tokens}


class ShapeResult(Model):
    """One line of one_batch's ``--result-filename`` JSONL (the fields e2e reads; seconds)."""

    batch_size: int
    input_len: int
    output_len: int
    prefill_latency: float | None = None
    median_decode_latency: float | None = None


class PatchCount(Model):
    patch_id: str
    state: str = ""
    served_by_patch: int = 0
    served_by_original: int = 0
    passed_on: int = Field(default=0, description="calls handed to the same op's patch stacked behind it")
    captured_by_patch: int = Field(default=0, description="in-process arm-runs: calls inside the recapture")
    captured_by_original: int = 0
    reason: str = ""


class ArmRun(Model):
    """One finished process."""

    round: int
    arm: str
    position: int = Field(description="its place in the round's order, 0-based")
    command: list[str]
    env: dict[str, str] = Field(description="the variables e2e set for it")
    seconds: float
    results: list[ShapeResult]
    patches: list[PatchCount] = Field(default_factory=list, description="summed over the process's processes")
    patches_source: str = Field(default="none", description="'status records', 'ASTRA-PATCHES line', 'in-process "
                                                            "counters' or 'none'")
    graphs: bool | None = Field(default=None, description="in-process: the decode graphs were recaptured for this "
                                                          "arm-run (None: a process of its own)")
    gpu: GpuState | None = Field(default=None, description="the GPU's clocks, temperature and power while it ran "
                                                          "(its ASTRA-GPU line; None without NVML)")


class ShapeReport(Model):
    batch_size: int
    input_len: int
    output_len: int
    decode: MetricSummary
    prefill: MetricSummary


class PatchCallRow(Model):
    patch_id: str
    arm: str
    processes: int
    served_by_patch: int
    served_by_original: int
    passed_on: int = Field(default=0, description="calls handed to the same op's patch stacked behind it")
    states: list[str]


class E2EReport(Model):
    created: str
    out: str
    config: E2EConfig
    rounds_done: int = Field(description="rounds with all three arms finished")
    warmup_processes: int = Field(default=0, description="warm-up processes that ran (r000/; not in the statistics)")
    stopped: str = ""
    shapes: list[ShapeReport]
    patch_calls: list[PatchCallRow]
    problems: list[str] = Field(default_factory=list, description="what keeps any gain from counting")
    not_reached: list[str] = Field(default_factory=list,
                                   description="patches whose op this forward never called (no call served by the "
                                               "patch or the original in any B or C process): not counted")
    shadowed: list[str] = Field(default_factory=list,
                                description="B processes where a patch stacked behind another got no call at all "
                                            "because the one in front served every call (not a problem)")
    verdict: Verdict
    reasons: list[str]
    halfwidth: float | None = Field(default=None, description="the widest decode B/A half-width")
    rounds_needed: int | None = Field(default=None, description="estimated rounds for the target half-width")
    gpu_findings: list[str] = Field(default_factory=list, description="per batch size: were the slower processes "
                                    "the ones on lower clocks (why processes differ; gpu_state.clock_finding)")
    forecast: list[ForecastCheck] = Field(default_factory=list, description="per batch shape: the decode B/A the "
                                          "patches' kernel records forecast, beside the measured one (forecast.py)")


Progress = Callable[[str], None]


def arm_order(round_no: int) -> tuple[str, ...]:
    """A B C rotated by one each round (1-based): every arm runs first, second and third equally often."""
    k = (round_no - 1) % len(ARMS)
    return ARMS[k:] + ARMS[:k]


def arm_env(arm: str, patches: str, status_dir: Path, round_no: int) -> dict[str, str]:
    """The variables that make a process arm A, B or C (plus where its status records go, and its name)."""
    env = {ENV_SELECT: "off" if arm == "A" else patches, ENV_STATUS_DIR: str(status_dir),
           "ASTRA_E2E_ROUND": str(round_no), "ASTRA_E2E_ARM": arm}
    if arm == "C":
        env[ENV_PLACEBO] = "1"
    return env


def default_forward(in_process: bool = False) -> list[str]:
    return [sys.executable, "-m", INPROCESS_MODULE if in_process else DEFAULT_FORWARD_MODULE]


def preflight(forward: Sequence[str] | None, one_batch_args: Sequence[str], in_process: bool = False) -> list[str]:
    """The command prefix to run, or one line naming what is missing: e2e's default forward is SGLang's
    one_batch run by ``python -m astra_sglang.profile.one_batch_child`` (installed with astra-sglang), which needs
    SGLang and a CUDA GPU."""
    if not [a for a in one_batch_args if a != "--"]:
        raise AstraError("nothing to run: give the one_batch (launch_server) arguments after `--`, e.g. "
                         "-- --model-path M --load-format dummy")
    for own in OWN_ARGS:
        if any(a == own or a.startswith(own + "=") for a in one_batch_args):
            raise AstraError(f"{own} is e2e's own (one file per process in the run folder); leave it out")
    if forward:
        script = Path(forward[-1])
        if len(forward) == 1 and not script.is_file():
            raise AstraError(f"--forward {script}: no such file")
        return [sys.executable, str(script)] if len(forward) == 1 and script.suffix == ".py" else list(forward)
    import importlib.util

    if importlib.util.find_spec("sglang") is None:
        raise AstraError("SGLang is not installed in this Python: the default forward is SGLang's one_batch "
                         "(install 'astra-sglang[sglang]'), or pass --forward SCRIPT")
    try:
        import torch

        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    if not gpu:
        raise AstraError("no CUDA GPU visible: SGLang's model forward (one_batch) needs one; run e2e on the GPU "
                         "host, or pass --forward SCRIPT")
    return default_forward(in_process)


# ------------------------------------------------------------------------------------------- one process

def parse_results(path: Path) -> list[ShapeResult]:
    """one_batch's JSONL (it appends one line per batch shape at exit); unknown fields ignored."""
    out: list[ShapeResult] = []
    if not path.is_file():
        return out
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        raw = json.loads(line)
        out.append(ShapeResult(**{k: raw.get(k) for k in ShapeResult.model_fields if k in raw}))
    return out


def patches_from_line(stdout: str) -> list[PatchCount]:
    """forward.py's ``ASTRA-PATCHES {json}`` line (its own process only), the last one printed."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith(STATUS_LINE)]
    if not lines:
        return []
    data = json.loads(lines[-1][len(STATUS_LINE):])
    return [PatchCount(patch_id=pid, state=str(d.get("state", "")), served_by_patch=int(d.get("patch", 0)),
                       served_by_original=int(d.get("original", 0)), passed_on=int(d.get("passed_on", 0)),
                       reason=str(d.get("reason", "")))
            for pid, d in sorted(data.items())]


def patches_from_records(status_dir: Path) -> list[PatchCount]:
    """The plugin's status records of every process the run started (with tensor parallelism, one per rank)."""
    from astra_sglang.patches.tooling.status_report import aggregate, server_dirs

    if not status_dir.is_dir():
        return []
    rows: dict[str, PatchCount] = {}
    for folder in server_dirs(status_dir):
        for row in aggregate(folder)["patches"]:
            c = rows.setdefault(row["patch_id"], PatchCount(patch_id=row["patch_id"]))
            c.served_by_patch += row["served_by_patch"]
            c.served_by_original += row["served_by_original"]
            c.passed_on += row.get("passed_on", 0)
            c.state = ", ".join(sorted({*filter(None, c.state.split(", ")), *row["states"].values()}))
            c.reason = c.reason or "; ".join(row["reasons"])
    return [rows[k] for k in sorted(rows)]


def run_arm(folder: Path, cfg: E2EConfig, round_no: int, arm: str, position: int) -> ArmRun:
    """One fresh process of one arm (round 0: the warm-up ``position + 1``); its ``arm.json`` is written only once
    it finished with results."""
    who = f"round {round_no} arm {arm}" if round_no else f"warm-up process {position + 1} (arm {arm}'s command)"
    if folder.exists():
        shutil.rmtree(folder)  # an unfinished earlier attempt: its files would mix with this one's
    folder.mkdir(parents=True)
    result = folder / "result.jsonl"
    cmd = [*cfg.forward, *cfg.one_batch_args, "--result-filename", str(result)]
    extra = {**arm_env(arm, cfg.patches, folder / "status", round_no), **child_env(cfg.prefill_chunk_tokens)}
    rc, seconds = launch(folder, cmd, extra, cfg.timeout_s, who)
    stdout = (folder / "stdout.log").read_text(errors="replace")
    try:
        results = parse_results(result)
    except (ValueError, ValidationError) as e:
        raise AstraError(f"{who}: unreadable results {result} ({e})") from None
    if rc != 0 or not results:
        why = f"exited with {rc}" if rc != 0 else "wrote no results"
        raise AstraError(f"{who}: the forward {why} ({why_it_died(folder / 'stderr.log')}); "
                         f"see {folder}")
    patches, source = patches_from_records(folder / "status"), "status records"
    if not patches:
        patches, source = patches_from_line(stdout), "ASTRA-PATCHES line"
    try:
        gpu = gpu_state.from_stdout(stdout)
    except (ValueError, ValidationError):
        gpu = None  # a garbled line costs the finding, never the measurement
    run = ArmRun(round=round_no, arm=arm, position=position, command=cmd, env=extra, seconds=seconds,
                 results=results, patches=patches, patches_source=source if patches else "none", gpu=gpu)
    write_atomic(folder / ARM_FILE, run.model_dump_json(indent=1) + "\n")
    return run


def launch(folder: Path, cmd: list[str], extra: dict[str, str], timeout_s: float, who: str) -> tuple[int, float]:
    """One forward process with ``extra`` over this environment (never an inherited patch selection, placebo or
    prefill grouping: the run's config says those), stdout/stderr kept in ``folder``; (exit status, seconds). It
    never outlives us: a timeout, Ctrl-C or SIGTERM ends its process group."""
    env = {k: v for k, v in os.environ.items() if k not in (ENV_SELECT, ENV_PLACEBO, ENV_PREFILL_TOKENS)}
    env.update(extra)
    t0 = time.monotonic()
    with open(folder / "stdout.log", "w") as out, open(folder / "stderr.log", "w") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop(proc)
            raise AstraError(f"{who}: the forward ran past {timeout_s:.0f} s; "
                             f"see {folder / 'stderr.log'}") from None
        except BaseException:  # Ctrl-C, SIGTERM: the forward must not outlive us on the GPU
            _stop(proc)
            raise
    return rc, time.monotonic() - t0


def _stop(proc: subprocess.Popen[Any]) -> None:
    """End the forward's process group (it was started in its own session: SGLang's TP ranks go with it)."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


_RAISED = re.compile(r"^(?:\[rank\d+\]:\s*)?((?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt)\b:?.*)$")


def why_it_died(path: Path) -> str:
    """The exception a dead forward raised, else its last stderr line. torch's distributed teardown prints a
    warning after the traceback (H100, 2026-12-05: "destroy_process_group() was not called" hid an OOM).
    An OOM gets what to change: one_batch prefills the whole batch in one forward, beside the static pool
    (H100, 2026-12-06: batch 32 at context 8160 ran out at --mem-fraction-static 0.72 and 0.655, while the KV
    pool needs about 0.63 of the card for those 261k tokens: that shape does not fit an 80 GB card in one forward)."""
    lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()] if path.is_file() else []
    if not lines:
        return "no output on stderr"
    for ln in reversed(lines):
        m = _RAISED.match(ln)
        if m:
            why = m.group(1)[:300]
            if "OutOfMemoryError" in why:
                why += (" [one_batch prefills the whole batch at once: a smaller --mem-fraction-static leaves that "
                        "prefill more room, as long as the KV pool still holds batch x (input + output) tokens; "
                        "where both do not fit, --prefill-chunk-tokens N prefills it in groups, "
                        "or a smaller batch or input length]")
            return why
    return lines[-1][:300]


# ------------------------------------------------------------------------------------------------ the run

def arm_dir(out: Path, round_no: int, arm: str) -> Path:
    return out / f"r{round_no:03d}" / arm


def warmup_dir(out: Path, number: int) -> Path:
    """Warm-up ``number`` (1-based): round 0, kept apart from the rounds."""
    return out / "r000" / f"W{number}"


def read_config(path: Path) -> E2EConfig:
    """A run folder's ``e2e.json``; one that is not an e2e run's is refused in one line."""
    try:
        return E2EConfig.model_validate_json(path.read_text())
    except ValidationError as e:
        raise AstraError(f"{path}: not an e2e run's configuration ({e.error_count()} problem(s))") from None


def prepare_folder(out: Path, cfg: E2EConfig, forecasts: Forecasts | None = None) -> None:
    """A new run folder, or the same measurement's to resume; another measurement's is refused. ``forecasts``
    go in where the folder has none yet: a resumed run keeps the forecast it started with."""
    path = out / CONFIG_FILE
    if path.is_file():
        old = read_config(path)
        if old.identity() != cfg.identity():
            diff = [k for k, v in cfg.identity().items() if old.identity()[k] != v]
            raise AstraError(f"{out} holds an e2e run of another measurement (different {', '.join(diff)}); "
                             "give another --out, or the same arguments to resume it")
    elif out.exists() and any(out.iterdir()):
        raise AstraError(f"{out} exists and is not an e2e run folder; give another --out")
    write_atomic(path, cfg.model_dump_json(indent=1) + "\n")
    if forecasts is not None and forecasts.steps and not (out / FORECAST_FILE).is_file():
        write_forecasts(out, forecasts)


def _finished(paths: Sequence[Path]) -> list[ArmRun]:
    """The processes whose ``arm.json`` was written (the last thing a process does: one with results but no
    arm.json was killed while exiting, and is unfinished); an unreadable one is left to be rerun."""
    runs = []
    for path in paths:
        try:
            runs.append(ArmRun.model_validate_json(path.read_text()))
        except ValidationError:
            continue
    return runs


def load_done(out: Path) -> dict[tuple[int, str], ArmRun]:
    """The finished processes of the rounds of an earlier attempt (warm-ups apart: see ``load_warmups``)."""
    return {(r.round, r.arm): r for r in _finished(sorted(out.glob(f"r*/*/{ARM_FILE}"))) if r.round >= 1}


def load_warmups(out: Path) -> dict[int, ArmRun]:
    """The finished warm-up processes, by number (1-based)."""
    return {r.position + 1: r for r in _finished(sorted(out.glob(f"r000/W*/{ARM_FILE}"))) if r.round == 0}


def _refuse_another_gpu(out: Path, kept: Sequence[ArmRun]) -> None:
    """A run folder carried back from one device call and resumed on the next may land on another GPU model (the
    lab lends H100s and H200s alike): their step times differ by a third, and pooling them would make noise look like
    a patch's effect. One measurement is one GPU model; where NVML cannot name this one, nothing is refused."""
    from astra_sglang.platform_info import same_gpu

    here = gpu_state.this_gpu()
    there = sorted({r.gpu.gpu for r in kept if r.gpu is not None and r.gpu.gpu})
    if here and there and not all(same_gpu(here, g) for g in there):
        raise AstraError(f"{out}: its finished processes ran on {', '.join(there)}, this machine has {here}; one "
                         "e2e measurement is one GPU model: give another --out here")


def run(cfg: E2EConfig, out: Path, progress: Progress | None = None,
        forecasts: Forecasts | None = None) -> E2EReport:
    """Rounds until ``rounds`` are done and then until the decode B/A intervals are narrow enough or
    ``max_rounds``; the report is rewritten after every round, so a killed run leaves one."""
    say = progress or (lambda msg: None)
    out = Path(out)
    prepare_folder(out, cfg, forecasts)
    done = load_done(out)
    warm = load_warmups(out)
    kept = len(done) + len(warm)
    _refuse_another_gpu(out, [*done.values(), *warm.values()])
    say(f"resuming {out}: {kept} finished process(es) kept" if kept else f"run folder {out}")
    fewest = fewest_processes()
    if cfg.max_rounds < fewest:
        say(f"--max-rounds {cfg.max_rounds}: with fewer than {fewest} processes per arm no interval can exclude 1, "
            f"so this run can only report 'no measurable change' (use --rounds {fewest} or more for a verdict)")
    for n in range(1, cfg.warmup_processes + 1):
        if n in warm:
            continue
        say(f"warm-up {n}/{cfg.warmup_processes}: arm A's command, not in the statistics (Triton/JIT caches)")
        warm[n] = run_arm(warmup_dir(out, n), cfg, 0, "A", n - 1)
    round_no = 0
    while True:
        round_no += 1
        for pos, arm in enumerate(arm_order(round_no)):
            if (round_no, arm) in done:
                continue
            say(f"round {round_no}: {arm} ({ARM_NAMES[arm]})")
            done[(round_no, arm)] = run_arm(arm_dir(out, round_no, arm), cfg, round_no, arm, pos)
        report = build_report(cfg, [*warm.values(), *done.values()], out)
        stop = _stop_reason(cfg, round_no, report)
        report.stopped = stop or (f"not yet: written after round {round_no} (if the run was killed, the same "
                                  "command with the same --out goes on)")
        write_atomic(out / REPORT_FILE, report.model_dump_json(indent=1) + "\n")
        if stop:
            say(f"stopped: {stop}")
            return report
        if round_no >= cfg.rounds:
            say(f"decode B/A half-width {report.halfwidth:.3f} > target {cfg.target_halfwidth:.3f}: one more round"
                if report.halfwidth is not None else "no B/A interval yet: one more round")


def report_only(out: Path) -> E2EReport:
    """The report of a run folder from its finished processes, running nothing (a run cut by a time limit):
    ``report.json`` rewritten."""
    out = Path(out)
    path = out / CONFIG_FILE
    if not path.is_file():
        raise AstraError(f"{out} is not an e2e run folder (no {CONFIG_FILE})")
    cfg = read_config(path)
    runs = [*load_warmups(out).values(), *load_done(out).values()]
    report = build_report(cfg, runs, out)
    measured = sum(1 for r in runs if r.round >= 1)
    report.stopped = (f"report only: {measured} finished process(es) of the rounds read, nothing run "
                      "(the same e2e command with the same --out goes on)")
    write_atomic(out / REPORT_FILE, report.model_dump_json(indent=1) + "\n")
    return report


def _stop_reason(cfg: E2EConfig, round_no: int, report: E2EReport) -> str:
    if round_no < cfg.rounds:
        return ""
    hw = report.halfwidth
    if hw is not None and hw < cfg.target_halfwidth:
        return f"every decode B/A half-width below the target {cfg.target_halfwidth:g} after {round_no} rounds"
    if round_no >= cfg.max_rounds:
        return f"--max-rounds {cfg.max_rounds} reached"
    return ""


# ---------------------------------------------------------------------------------------------- the report

def expected_patches(cfg: E2EConfig, runs: Sequence[ArmRun]) -> list[str]:
    """The patches B must see serving: those named, or with 'all' every patch B's processes reported."""
    if cfg.patches.strip().lower() in ALL_VALUES:
        return sorted({c.patch_id for r in runs if r.arm == "B" for c in r.patches})
    return sorted({p.strip() for p in cfg.patches.split(",") if p.strip()})


def not_reached(cfg: E2EConfig, runs: Sequence[ArmRun]) -> list[str]:
    """Expected patches this forward never called: reported (installed) by B or C processes, yet no call served by
    the patch or by SGLang's original in any of them (merge-state-mr-k1 on the triton attention backend). Their
    serving nothing says nothing about B: they are left out of the verdict, and named."""
    seen: dict[str, int] = {}
    for r in runs:
        if r.arm in ("B", "C"):
            for c in r.patches:
                seen[c.patch_id] = seen.get(c.patch_id, 0) + c.served_by_patch + c.served_by_original + c.passed_on
    return [pid for pid in expected_patches(cfg, runs) if seen.get(pid) == 0]


def shadowed(c: PatchCount | None, run: ArmRun) -> str | None:
    """Why a patch of a stack served no call in a B process without that being a problem, or None.

    A rewrite stands in front of a retune of its op (``patches.install.stacks_on``): the rewrite serves its guard
    and passes the other calls on, the retune serves what reaches it. In one B process (an in-process arm-run is one
    batch size) either may then serve nothing: the rewrite when every call lay outside its guard (all passed on, the
    retune served them), the retune when the rewrite served every call (none reached it: no call at all, which is
    no fall back, since a fall back counts calls served by the original). 2026-12-06, context 8160 at batch 1 and
    16: the rewrite served both, and e2e called the idle retune a problem and refused the verdict."""
    if c is None or c.state != "active" or c.served_by_patch or c.served_by_original:
        return None
    others = [o for o in run.patches if o.patch_id != c.patch_id]
    if c.passed_on and any(o.served_by_patch for o in others):
        return "it passed every call on to the patch stacked behind it, which served them"
    if not c.passed_on and any(o.served_by_patch for o in others) and not any(o.passed_on for o in others):
        return "the patch stacked in front of it served every call"
    return None


def shadowed_runs(cfg: E2EConfig, runs: Sequence[ArmRun]) -> list[str]:
    """Per expected patch and reason, the B processes (arm-runs) where ``shadowed`` excused it, one line each."""
    out = []
    for pid in expected_patches(cfg, runs):
        rounds: dict[str, set[int]] = {}
        for r in runs:
            why = shadowed(next((c for c in r.patches if c.patch_id == pid), None), r) if r.arm == "B" else None
            if why:
                rounds.setdefault(why, set()).add(r.round)
        where = "arm-runs" if cfg.in_process else "process(es)"
        out += [f"{pid} served no call in the B {where} of round(s) {', '.join(map(str, sorted(rs)))}: {why}"
                for why, rs in rounds.items()]
    return out


def problems(cfg: E2EConfig, runs: Sequence[ArmRun]) -> list[str]:
    """What makes B or C not what they claim: an expected patch that was reached but served no call in a B
    process (one this forward never reached is no problem: ``not_reached``), a placebo process whose hooks were
    never reached or that served calls by a patch; in-process, an arm-run whose graph recapture made no hooked call
    while others did (stale graphs), and patch calls inside A's or C's graphs."""
    out = []
    expect = expected_patches(cfg, runs)
    skip = set(not_reached(cfg, runs))
    if not expect:
        out.append("no patch reported by any B process: nothing was patched (see a B process's stderr.log)")
    elif skip == set(expect):
        out.append("no expected patch was reached in this forward: B ran SGLang's own kernels only")
    in_graphs = any(c.captured_by_patch + c.captured_by_original for r in runs if r.graphs for c in r.patches)
    for r in sorted(runs, key=lambda r: (r.round, r.arm)):
        counts = {c.patch_id: c for c in r.patches}
        if r.arm == "B":
            for pid in expect:
                if pid in skip:
                    continue
                c = counts.get(pid)
                if (c is None or c.served_by_patch == 0) and shadowed(c, r) is None:
                    why = f" (state {c.state}: {c.reason})" if c is not None and c.reason else ""
                    out.append(f"patch {pid} served no calls in round {r.round}'s B process{why}")
        if r.graphs:  # in-process: what the recaptured graphs hold is what the arm's decode steps replay
            held = [counts[p] for p in expect if p not in skip and p in counts]
            if in_graphs and not any(c.captured_by_patch + c.captured_by_original for c in held):
                out.append(f"round {r.round}'s {r.arm} arm-run made no hooked call inside its graph recapture (other "
                           "arm-runs did): its decode steps replayed graphs captured for another arm")
            if r.arm != "B" and any(c.captured_by_patch for c in held):
                out.append(f"round {r.round}'s {r.arm} graphs hold patch calls: that arm ran the patches")
        if r.arm == "C":
            if not any(c.served_by_original for c in r.patches):
                out.append(f"the placebo's hooks served no calls in round {r.round}: that C process was no placebo")
            if any(c.served_by_patch for c in r.patches):
                out.append(f"the placebo process of round {r.round} ran patch kernels: it was no placebo")
    return out


def build_report(cfg: E2EConfig, runs: Sequence[ArmRun], out: Path) -> E2EReport:
    """Per batch shape: medians, B/A and C/A intervals and verdicts (decode and prefill); per patch: calls.
    Warm-up processes (round 0) are counted, never measured."""
    warmups = sum(1 for r in runs if r.round == 0)
    runs = [r for r in runs if r.round >= 1]
    shapes: dict[tuple[int, int, int], dict[str, dict[str, list[float]]]] = {}
    for r in sorted(runs, key=lambda r: (r.round, r.arm)):
        for s in r.results:
            per = shapes.setdefault((s.batch_size, s.input_len, s.output_len), {"decode": {}, "prefill": {}})
            if s.median_decode_latency is not None:
                per["decode"].setdefault(r.arm, []).append(s.median_decode_latency)
            if s.prefill_latency is not None:
                per["prefill"].setdefault(r.arm, []).append(s.prefill_latency)
    trouble = problems(cfg, runs)
    unit = cfg.sample_unit
    reports = []
    for i, (key, per) in enumerate(sorted(shapes.items())):
        bs, il, ol = key
        reports.append(ShapeReport(batch_size=bs, input_len=il, output_len=ol,
                                   decode=summarize("decode step median", per["decode"], trouble,
                                                    target_halfwidth=cfg.target_halfwidth, seed=cfg.seed + 10 * i,
                                                    unit=unit),
                                   prefill=summarize("prefill latency", per["prefill"], trouble,
                                                     target_halfwidth=cfg.target_halfwidth,
                                                     seed=cfg.seed + 10 * i + 5, unit=unit)))
    widths = [s.decode.b_over_a.half_width for s in reports if s.decode.b_over_a is not None]
    needed = [s.decode.rounds_needed for s in reports if s.decode.rounds_needed is not None]
    verdicts = [m.verdict for s in reports for m in (s.decode, s.prefill)]
    reasons = [f"{shape_label(s.batch_size, s.input_len, s.output_len)} {m.metric}: {m.verdict}: "
               f"{'; '.join(m.reasons[:2])}" for s in reports for m in (s.decode, s.prefill)] or ["no results"]
    skipped = not_reached(cfg, runs)
    if skipped:
        reasons.append(f"not reached in this forward, so not counted: {', '.join(skipped)} (no call served by the "
                       "patch or SGLang's original in any B or C process: its op is not on this forward's path)")
    # a round counts where every arm measured every batch shape: the in-process child runs each shape's rounds in
    # turn, so a cut run (2026-12-07, H100: 8 rounds at bs 32, 3 at bs 128) counted 8 rounds that bs 128 never had
    arms_of: dict[int, dict[tuple[int, int, int], set[str]]] = {}
    for r in runs:
        for s in r.results:
            arms_of.setdefault(r.round, {}).setdefault((s.batch_size, s.input_len, s.output_len), set()).add(r.arm)
    complete = [k for k, per in arms_of.items() if all(per.get(key) == set(ARMS) for key in shapes)]
    forecasts, unread = read_forecasts(out)
    if unread:
        reasons.append(unread)
    forecast = check(forecasts, {(s.batch_size, s.input_len, s.output_len):
                                 (s.decode.medians.get("A"), s.decode.b_over_a) for s in reports})
    missed = [f for f in forecast if f.holds is False]
    if missed:
        reasons.append("not as the kernel records forecast: " + "; ".join(
            f"{f.shape()} {f.predicted:.3f} outside {f.measured.text() if f.measured else '-'}"
            for f in missed) + f" ({MISS})")
    findings = [gpu_state.clock_finding(bs, [(r.arm, s.median_decode_latency, r.gpu) for r in runs
                                             for s in r.results if s.batch_size == bs and s.median_decode_latency])
                for bs in sorted({k[0] for k in shapes})] if not cfg.in_process else []
    return E2EReport(created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), out=str(out), config=cfg, gpu_findings=findings,
                     rounds_done=len(complete), warmup_processes=warmups, shapes=reports, forecast=forecast,
                     patch_calls=patch_calls(runs), problems=trouble, not_reached=skipped,
                     shadowed=shadowed_runs(cfg, runs),
                     verdict=overall(verdicts) if reports else "no measurable change",
                     reasons=reasons, halfwidth=max(widths) if len(widths) == len(reports) and
                     widths else None, rounds_needed=max(needed) if needed else None)


def patch_calls(runs: Sequence[ArmRun]) -> list[PatchCallRow]:
    """Per patch and arm: calls served by the patch and by SGLang's original, summed over the arm's processes."""
    rows: dict[tuple[str, str], PatchCallRow] = {}
    for r in runs:
        for c in r.patches:
            row = rows.setdefault((c.patch_id, r.arm), PatchCallRow(patch_id=c.patch_id, arm=r.arm, processes=0,
                                                                    served_by_patch=0, served_by_original=0,
                                                                    states=[]))
            row.processes += 1
            row.served_by_patch += c.served_by_patch
            row.served_by_original += c.served_by_original
            row.passed_on += c.passed_on
            if c.state and c.state not in row.states:
                row.states.append(c.state)
    return [rows[k] for k in sorted(rows)]
