"""Start or resume one optimizer run: preflight, run folder, evaluator, model, live view, exit status.

Exit codes: 0 finished, 3 stopped to wait for the evaluation queue (``--resume`` continues), 2 user error.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from rich.console import Console

from astra_sglang.contract.op import ManifestError, load_manifest
from astra_sglang.errors import AstraError
from astra_sglang.loop.evaluator import (
    EvalPending,
    Evaluator,
    LocalEvaluator,
    QueueEvaluator,
)
from astra_sglang.loop.records import LoopOptions, RunMeta, WinnerInfo
from astra_sglang.loop.runfolder import RunFolder, new_run_id, now_iso

EXIT_WAITING = 3


@dataclass
class OptimizeRequest:
    op: Optional[str]
    options: LoopOptions
    extracted: Path = Path("extracted")
    runs_dir: Path = Path("runs")
    run_id: Optional[str] = None
    resume: Optional[str] = None
    overrides: dict[str, Any] = field(default_factory=dict)
    live: Optional[bool] = None
    register_patch: bool = False
    patch_id: Optional[str] = None


def resolve_op_dir(op: str, extracted: Path) -> Path:
    direct = Path(op)
    if (direct / "manifest.json").is_file():
        return direct.resolve()
    candidate = Path(extracted) / op
    if (candidate / "manifest.json").is_file():
        return candidate.resolve()
    raise AstraError(f"no extracted op {op!r} (looked for {candidate}/manifest.json); run "
                     f"`python -m astra_sglang extract {op}` first")


def _apply_overrides(opts: LoopOptions, overrides: dict[str, Any]) -> LoopOptions:
    """On --resume only settings that do not change what was already done may change."""
    model_keys = {"model", "base_url", "api_key_env", "request_timeout_s", "file_timeout_s", "trace"}
    model_update = {k: v for k, v in overrides.items() if k in model_keys and v is not None}
    top = {k: v for k, v in overrides.items() if k in {"rounds", "eval_wait_s"} and v is not None}
    if "rounds" in top and top["rounds"] < opts.rounds:
        raise AstraError(f"--rounds {top['rounds']} on resume: the run already plans {opts.rounds}; rounds can be "
                         f"added, not removed")
    return opts.model_copy(update={**top, "model": opts.model.model_copy(update=model_update)})


def make_evaluator(opts: LoopOptions, op_dir: Path, folder: RunFolder, run_id: str) -> Evaluator:
    manifest = load_manifest(op_dir)
    if opts.eval_queue:
        return QueueEvaluator(op_dir, Path(opts.eval_queue), run_id, manifest, wait_s=opts.eval_wait_s,
                              poll_s=min(5.0, max(0.2, opts.eval_wait_s / 20 or 5.0)), note=opts.label,
                              check_cache=folder.evals_dir)
    return LocalEvaluator(op_dir, manifest, cache_dir=folder.evals_dir)


def run_optimize(req: OptimizeRequest, console: Optional[Console] = None) -> int:
    from astra_sglang.agents.models import build_model, configure_tracing, preflight
    from astra_sglang.agents.recording import ModelAuthFailed, RecordingModel
    from astra_sglang.loop.optimizer import Optimizer
    from astra_sglang.loop.plot import plot_run
    from astra_sglang.loop.view import LiveView, final_table

    if console is None:
        console = Console()
        if not console.is_terminal:  # logs and CI: wide enough for the final table
            console = Console(width=160)
    if req.resume:
        folder = RunFolder.find(req.runs_dir, req.resume)
        meta = folder.read_meta()
        opts = _apply_overrides(meta.options, req.overrides)
        op_dir = Path(meta.op_dir)
        meta.options, meta.rounds, meta.model = opts, opts.rounds, opts.model.model
    else:
        if not req.op:
            raise AstraError("optimize needs an OP (or --resume RUN)")
        op_dir = resolve_op_dir(req.op, req.extracted)
        opts = req.options
        folder = None
    try:
        manifest = load_manifest(op_dir)
    except ManifestError as e:
        raise AstraError(str(e)) from None

    note = asyncio.run(preflight(opts.model))  # before any work: a bad key or server is one clear error
    console.print(f"model: {opts.model.describe()}: {note}", highlight=False)

    if folder is None:
        run_id = req.run_id or new_run_id()
        folder = RunFolder.create(req.runs_dir, manifest.short_name, run_id)
        meta = RunMeta(run_id=run_id, op=manifest.short_name, op_id=manifest.op_id, op_dir=str(op_dir),
                       model=opts.model.model, rounds=opts.rounds,
                       mode="single-agent" if opts.single_agent else "multi-agent", created=now_iso(),
                       updated=now_iso(), label=opts.label, options=opts)
    folder.lock()
    meta.status, meta.message = "running", None
    folder.write_meta(meta)
    console.print(f"run folder: {folder.path}", highlight=False)

    evaluator = make_evaluator(opts, op_dir, folder, meta.run_id)
    configure_tracing(opts.model)
    model = RecordingModel(build_model(opts.model), folder, opts.retry)
    title = f"astra optimize {manifest.short_name} ({meta.mode}, {opts.model.model})"
    winner: Optional[WinnerInfo] = None
    try:
        with LiveView(title, opts.rounds, opts.label, console=console, live=req.live) as view:
            optimizer = Optimizer(folder, meta, manifest, op_dir, evaluator, model, view)
            winner = asyncio.run(_run_and_close(optimizer, model))
        meta.status, meta.winner = "done", winner
    except EvalPending as e:
        meta.status, meta.message = "waiting_eval", str(e)
        console.print(f"[yellow]{e}[/]\nOn the GPU host: python -m astra_sglang evaluate {e.queue_dir}\n"
                      f"Then: python -m astra_sglang optimize --resume {folder.path}", highlight=False)
        return EXIT_WAITING
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
    console.print(f"run log: {folder.path / 'log.jsonl'}; best: {folder.best_dir}", highlight=False)
    png = plot_run(records, winner, title, folder.path / "speedup.png", opts.label)
    if png is not None:
        console.print(f"plot: {png}", highlight=False)
    if req.register_patch:
        if winner is None or winner.round is None:
            console.print("no winner: nothing to register as a patch")
        else:
            register_winner(folder.path, req.patch_id, console)
    return 0


async def _run_and_close(optimizer: Any, model: Any) -> WinnerInfo:
    try:
        return await optimizer.run()
    finally:
        await model.close()  # inside the loop that owns the HTTP connections


def register_winner(run_dir: Path, patch_id: Optional[str], console: Console) -> Path:
    """Hand the winner to the patch registry (patches/<op>/<patch-id>/), which re-pins and cites evidence."""
    try:
        from astra_sglang.patches.tooling.add import add_from_run
    except ImportError as e:
        raise AstraError(f"the patch registry is not available ({e})") from None
    path = add_from_run(run_dir, patch_id=patch_id)
    console.print(f"registered patch: {path}", highlight=False)
    return path
