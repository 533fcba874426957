"""Start or resume one optimizer run: preflight, run folder, evaluator, model, live view, exit status.

Exit codes: 0 finished with at least one correct candidate, 1 finished without one (every round failed), 2 user
error, 3 stopped to wait for the evaluation queue (``--resume`` continues); Ctrl-C / SIGTERM leave the run
"interrupted" with every finished step kept (130 / 143, see cli/main.py).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from astra_sglang.contract.op import (
    Manifest,
    ManifestError,
    find_op_dir,
    load_manifest,
    unstated_dims,
    verdict_digest,
)
from astra_sglang.contract.result import EvalResult
from astra_sglang.contract.validation import require_validated
from astra_sglang.errors import AstraError
from astra_sglang.loop.evaluator import (
    EvalPending,
    Evaluator,
    LocalEvaluator,
    QueueEvaluator,
)
from astra_sglang.loop.records import (
    LoopOptions,
    RoundRecord,
    RoundSummary,
    RunMeta,
    RunSummary,
    WinnerInfo,
)
from astra_sglang.loop.runfolder import RunFolder, new_run_id, now_iso
from astra_sglang.loop.static_check import require_candidate_file, seed_name

EXIT_NO_SUCCESS = 1
EXIT_WAITING = 3


@dataclass
class OptimizeRequest:
    op: str | None
    options: LoopOptions
    extracted: Path = Path("extracted")
    runs_dir: Path = Path("runs")
    run_id: str | None = None
    resume: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    live: bool | None = None
    json: bool = False



def _apply_overrides(opts: LoopOptions, overrides: dict[str, Any]) -> LoopOptions:
    """On --resume only settings that do not change what was already done may change."""
    model_keys = {"model", "base_url", "api_key_env", "request_timeout_s", "file_timeout_s", "trace"}
    model_update = {k: v for k, v in overrides.items() if k in model_keys and v is not None}
    top = {k: v for k, v in overrides.items()
           if k in {"rounds", "eval_wait_s", "patience", "stop_at_bound_margin"} and v is not None}
    if "rounds" in top and top["rounds"] < opts.rounds:
        raise AstraError(f"--rounds {top['rounds']} on resume: the run already plans {opts.rounds}; rounds can be "
                         f"added, not removed")
    return opts.model_copy(update={**top, "model": opts.model.model_copy(update=model_update)})


def make_evaluator(opts: LoopOptions, op_dir: Path, folder: RunFolder, run_id: str) -> Evaluator:
    manifest = load_manifest(op_dir)
    if opts.eval_queue:
        return QueueEvaluator(op_dir, Path(opts.eval_queue), run_id, manifest, wait_s=opts.eval_wait_s,
                              # a folder listed once a second costs nothing; results land in bursts
                              poll_s=min(1.0, max(0.2, opts.eval_wait_s / 20 or 1.0)), note=opts.label,
                              check_cache=folder.evals_dir)
    return LocalEvaluator(op_dir, manifest, cache_dir=folder.evals_dir)


def require_timing_device(opts: LoopOptions) -> None:
    """A run that cannot time can never choose a winner: without a GPU, evaluate elsewhere or say so."""
    if opts.eval_queue:
        return
    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.harness import resolve_device

    if opts.eval.device == "auto" and resolve_device(EvalConfig(device="auto")) == "cpu":
        raise AstraError(
            "no CUDA GPU visible: candidates cannot be timed here, so no winner could be chosen. Evaluate on a GPU "
            "host through a queue: `optimize OP --eval-queue DIR` here (it stops with exit 3), `astra-sglang "
            "evaluate DIR` on the GPU host, then `optimize --resume RUN` (see docs/optimize.md); or pass --device "
            "cpu --shapes test for a correctness-only run of a Triton op")
    resolve_device(EvalConfig(device=opts.eval.device))  # --device cuda without a GPU: one line, now


def _problem(r: RoundRecord) -> str | None:
    text = r.error or r.first_failure
    return None if text is None else (text[:300] + "...") if len(text) > 300 else text


def summarize(folder: RunFolder, meta: RunMeta, exit_code: int, plot: Path | None = None,
              waiting_for: list[str] | None = None) -> RunSummary:
    rounds = [RoundSummary(round=r.round, status=r.status, correct=r.correct, geomean_speedup=r.geomean_speedup,
                           problem=_problem(r)) for r in folder.records()]
    return RunSummary(run_id=meta.run_id, op=meta.op, run_dir=str(folder.path), status=meta.status,
                      exit_code=exit_code, message=meta.message, winner=meta.winner, rounds=rounds,
                      best_dir=str(folder.best_dir) if folder.best_dir.is_dir() else None,
                      plot=str(plot) if plot is not None else None, waiting_for=waiting_for or [])


def no_success(records: list[RoundRecord], rounds: int) -> str | None:
    """Why a finished run must not exit 0: it was asked for rounds and none produced a correct candidate."""
    tried = [r for r in records if r.round > 0]
    if rounds == 0 or any(r.status == "ok" for r in tried):
        return None
    first = next((p for p in map(_problem, tried) if p), None)
    counts = ", ".join(f"{sum(r.status == s for r in tried)} {s}" for s in ("failed", "build_failed", "incorrect")
                       if any(r.status == s for r in tried))
    return (f"no round produced a correct candidate ({counts or 'none ran'})"
            + (f"; first problem: {first.splitlines()[0][:200]}" if first else ""))


def contract_moved(folder: RunFolder, meta: RunMeta, manifest: Manifest) -> str | None:
    """Why ``meta``'s run cannot resume under ``manifest``, or None. Its rounds were judged and ranked under the
    contract it was made against; resumed under a revision that moved its shapes, files or tolerances (decode
    attention, 2026-12-06: S 1024 -> 1033, q in the qkv rows), new candidates would be ranked against bests judged
    elsewhere. A run records ``verdict_digest``; an older run is held to the shapes its original was timed on."""
    name = manifest.short_name
    if meta.verdict_sha256 is not None:
        now = verdict_digest(manifest)
        if meta.verdict_sha256 == now:
            return None
        return (f"run {meta.run_id} was judged under another contract of {name} (its shapes, files or tolerances: "
                f"digest {meta.verdict_sha256[:12]}; {meta.op_dir} holds {now[:12]}). Start a new run "
                f"(`optimize {name}`), or resume where the op folder is the run's contract")
    r0 = folder.load_step(0, "result", EvalResult)
    if r0 is None or r0.timing is None:
        return None
    gone = unstated_dims(manifest, [s.dims for s in r0.timing.shapes])
    if not gone:
        return None
    return (f"run {meta.run_id} timed the original on shapes the {name} contract no longer states (first: {gone[0]}; "
            f"{len(gone)} of {len(r0.timing.shapes)}): the contract was revised since. Start a new run "
            f"(`optimize {name}`), or resume where the op folder is the run's contract")


def run_optimize(req: OptimizeRequest, console: Console | None = None) -> RunSummary:
    """The summary's exit code: 0 when some round produced a correct candidate, 1 when none did, 3 while
    waiting for the queue; a setup problem raises AstraError (exit 2)."""
    from astra_sglang.agents.models import build_model, configure_tracing, preflight
    from astra_sglang.agents.recording import ModelAuthFailed, RecordingModel, load_answered
    from astra_sglang.loop.optimizer import Optimizer
    from astra_sglang.loop.plot import plot_run
    from astra_sglang.loop.view import LiveView, final_table, shape_table

    if console is None:
        console = Console(stderr=req.json)  # with --json, stdout carries only the summary
        if not console.is_terminal:  # logs and CI: wide enough for the final table
            console = Console(width=160, stderr=req.json)
    if req.resume:
        folder = RunFolder.find(req.runs_dir, req.resume)
        meta = folder.read_meta()
        opts = _apply_overrides(meta.options, req.overrides)
        op_dir = Path(meta.op_dir)
        meta.options, meta.rounds, meta.model = opts, opts.rounds, opts.model.model
    else:
        if not req.op:
            raise AstraError("optimize needs an OP (or --resume RUN)")
        op_dir = find_op_dir(req.op, req.extracted)
        opts = req.options
        folder = None
    try:
        manifest = load_manifest(op_dir)
    except ManifestError as e:
        raise AstraError(str(e)) from None
    if folder is not None:
        moved = contract_moved(folder, meta, manifest)
        if moved:
            raise AstraError(moved)
        meta.verdict_sha256 = verdict_digest(manifest)  # a run made before digests were kept: its from now
    require_validated(op_dir, manifest.short_name)  # a contract the original never agreed with is no target
    require_timing_device(opts)

    note = asyncio.run(preflight(opts.model))  # before any work: a bad key or server is one clear error
    console.print(f"model: {opts.model.describe()}: {note}", highlight=False)

    if folder is None:
        run_id = req.run_id or new_run_id()
        if opts.seed_kernel:
            require_candidate_file(Path(opts.seed_kernel), manifest)
        folder = RunFolder.create(req.runs_dir, manifest.short_name, run_id)
        if opts.seed_kernel:  # the run keeps its own copy: a resume never depends on the file it came from
            (folder.path / seed_name(manifest)).write_text(Path(opts.seed_kernel).read_text())
        meta = RunMeta(run_id=run_id, op=manifest.short_name, op_id=manifest.op_id, op_dir=str(op_dir),
                       model=opts.model.model, rounds=opts.rounds,
                       mode="single-agent" if opts.single_agent else "multi-agent", created=now_iso(),
                       updated=now_iso(), label=opts.label, options=opts,
                       verdict_sha256=verdict_digest(manifest))
    folder.lock()
    meta.status, meta.message = "running", None
    folder.write_meta(meta)
    console.print(f"run folder: {folder.path}", highlight=False)

    evaluator = make_evaluator(opts, op_dir, folder, meta.run_id)
    configure_tracing(opts.model)
    model = RecordingModel(build_model(opts.model), folder, opts.retry, replay=load_answered(folder.path / "calls"))
    title = f"astra optimize {manifest.short_name} ({meta.mode}, {opts.model.model})"
    winner: WinnerInfo | None = None
    try:
        with LiveView(title, opts.rounds, opts.label, console=console, live=req.live) as view:
            optimizer = Optimizer(folder, meta, manifest, op_dir, evaluator, model, view)
            winner = asyncio.run(_run_and_close(optimizer, model))
        failure = no_success(folder.records(), opts.rounds)
        meta.status, meta.message, meta.winner = ("failed" if failure else "done"), failure, winner
    except EvalPending as e:
        meta.status, meta.message = "waiting_eval", str(e)
        console.print(f"[yellow]{e}[/]\nOn the GPU host: python -m astra_sglang evaluate {e.queue_dir}\n"
                      f"Then: python -m astra_sglang optimize --resume {folder.path}", highlight=False)
        return summarize(folder, meta, EXIT_WAITING, waiting_for=e.items)
    except ModelAuthFailed as e:
        meta.status, meta.message = "failed", str(e)
        raise AstraError(str(e)) from None
    except AstraError as e:
        meta.status, meta.message = "failed", str(e)
        raise
    except (KeyboardInterrupt, asyncio.CancelledError):
        meta.status, meta.message = "interrupted", "interrupted; --resume continues"
        raise
    finally:
        folder.write_meta(meta)
        folder.unlock()

    records = folder.records()
    console.print(final_table(records, winner, title, opts.label))
    shapes = shape_table(records, winner, _best_result(folder))
    if shapes is not None:
        console.print(shapes)
    console.print(f"run log: {folder.path / 'log.jsonl'}; best: {folder.best_dir}", highlight=False)
    png = plot_run(records, winner, title, folder.path / "speedup.png", opts.label)
    if png is not None:
        console.print(f"plot: {png}", highlight=False)
    code = EXIT_NO_SUCCESS if meta.status == "failed" else 0
    if meta.message:
        console.print(f"[red]{meta.message}[/]", highlight=False)
    return summarize(folder, meta, code, png)


async def _run_and_close(optimizer: Any, model: Any) -> WinnerInfo:
    try:
        return await optimizer.run()
    finally:
        await model.close()  # inside the loop that owns the HTTP connections


def _best_result(folder: RunFolder) -> EvalResult | None:
    """best/result.json: the winner's times on the GPU the run ranked on (None when there is no winner)."""
    path = folder.best_dir / "result.json"
    try:
        return EvalResult.model_validate_json(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None
