"""``astra-sglang report RUN [RUN ...]``: one markdown page (and its PNGs) for the people who judge the runs.

Everything on the page is read from the run folders as they were recorded: the label (a scripted run says so, a
model run says which model), the per-step costs from ``steps.jsonl`` (tokens as the SDK summed each agent run),
the per-round verdicts from the round records and the winner's per-shape times from ``best/result.json``. A number
the run did not measure is shown as "not measured", never filled in. The sweep baseline is round 0's ``tune`` step
(``rounds/r000/tune.json``, the original's own tunables swept), when the run has one; the page says whether the
winner beats it on every shape.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from astra_sglang.contract.op import canonical_op_id
from astra_sglang.contract.result import EvalResult, ShapeTiming
from astra_sglang.errors import AstraError
from astra_sglang.loop.records import RoundRecord, RunMeta, StepRecord, TuneOutcome
from astra_sglang.loop.runfolder import RunFolder, atomic_write
from astra_sglang.loop.stopping import best_per_round
from astra_sglang.loop.winner import (
    flat,
    gpu_of,
    mixed_gpus_note,
    ranking_gpu,
    same_gpu_text,
    speed_on_ranking_gpu,
    timing_gpus,
)
from astra_sglang.platform_info import same_gpu

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from astra_sglang.agents.config import TokenCount

NOT_MEASURED = "not measured"
NO_FINISHED_ROUND = "no finished round"
UNTIMED = "untimed: no candidate was timed"
REPORT_NAME = "report.md"


@dataclass
class ShapeRow:
    """One timed shape of a winner, with everything the page and the plot show for it."""

    dims: dict[str, int]
    dtype: str
    original_us: float
    sweep_us: float | None
    best_us: float | None
    bound_us: float | None
    speedup: float | None
    pct_of_bound: float | None
    library: str | None = None  # a library kernel the harness timed beside the original (the op's baseline)
    library_us: float | None = None
    served_by: str | None = None  # what the op manifest says SGLang serves at this shape; None: it does not say

    @property
    def name(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.dims.items()) + f" {self.dtype}"


@dataclass
class RunReport:
    folder: RunFolder
    meta: RunMeta
    records: list[RoundRecord]
    steps: list[StepRecord]
    best: EvalResult | None = None
    sweep: dict[tuple[str, str], float] | None = None
    rows: list[ShapeRow] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.meta.op}/{self.meta.run_id}"

    @property
    def mode(self) -> str:
        k = self.meta.options.candidates
        if self.meta.mode == "single-agent":
            return "single-agent" + (f", {k} single agents a round" if k > 1 else "")
        return f"multi-agent, K={k} candidate{'s' if k > 1 else ''} a round"

    @property
    def timed(self) -> bool:
        """Whether any candidate was timed: without a GPU (or before the queue answered) none is, and the
        original's 1.0x would read as "no gain" where nothing was measured."""
        return any(e.geomean_speedup is not None for r in self.records if r.round > 0 for e in r.entries())

    def best_speedup(self) -> str:
        """The summary table's cell: the best speedup, or why the run has none to show."""
        if not self.records:
            return NO_FINISHED_ROUND
        if not self.timed:
            return UNTIMED
        entries = flat(self.records)
        gpu = ranking_gpu(entries) if len(timing_gpus(entries)) > 1 else None
        return _f(self.best_so_far()[-1][1]) + "x" + (f" on {gpu}" if gpu else "")

    def best_so_far(self) -> list[tuple[int, float]]:
        """(round, best speedup so far), from round 0 (the original, 1.0x)."""
        out, best = [(0, 1.0)], 1.0
        for rnd, speed in best_per_round(self.records):
            if speed is not None and speed > best:
                best = speed
            out.append((rnd, best))
        return out


def load_run(path: Path, runs_dir: Path = Path("runs"), allow_unfinished: bool = False) -> RunReport:
    """A run folder (or a run id under ``runs_dir``) with at least one finished round, else one AstraError line.

    ``allow_unfinished``: a run without a finished round comes back with no records (the page lists it as
    such), so one run that just started does not keep the others of a multi-run report from being reported."""
    folder = RunFolder.find(runs_dir, str(path))
    meta = folder.read_meta()
    records = folder.records()
    if not records and not allow_unfinished:
        raise AstraError(f"{folder.path}: the run has no finished round (nothing to report)")
    steps: list[StepRecord] = []
    steps_path = folder.path / "steps.jsonl"
    if steps_path.is_file():
        for line in steps_path.read_text().splitlines():
            try:
                steps.append(StepRecord.model_validate_json(line))
            except ValueError:
                continue  # a torn last line of a killed run
    run = RunReport(folder=folder, meta=meta, records=records, steps=steps)
    if meta.winner is not None and meta.winner.round is not None and (folder.best_dir / "result.json").is_file():
        try:
            run.best = EvalResult.model_validate_json((folder.best_dir / "result.json").read_text())
        except ValueError as e:
            raise AstraError(f"{folder.best_dir / 'result.json'}: unreadable ({type(e).__name__})") from None
    run.sweep = read_sweep(folder.path, run.best.device if run.best is not None else None)
    if run.best is not None:
        run.rows = shape_rows(run.best, run.sweep)
    return run


def _shape_key(dims: dict[str, Any], dtype: str) -> tuple[str, str]:
    return json.dumps({k: int(v) for k, v in dims.items()}, sort_keys=True), str(dtype)


def _tune_outcome(run_dir: Path) -> TuneOutcome | None:
    return RunFolder(run_dir).load_step(0, "tune", TuneOutcome)


def read_sweep(run_dir: Path, device: str | None = None) -> dict[tuple[str, str], float] | None:
    """Per-shape best times of round 0's sweep baseline, or None when the run measured none, or (``device``: the
    winner's result's device) measured it on another GPU than the winner's times, which it may not stand beside."""
    outcome = _tune_outcome(run_dir)
    if outcome is None or outcome.baseline is None:
        return None
    if device is not None and not same_gpu_text(outcome.baseline.device, device):
        return None
    return {_shape_key(s.dims, s.dtype): s.best_us for s in outcome.baseline.shapes} or None


def sweep_missing(run_dir: Path, device: str | None = None) -> str:
    """Why a run has no sweep baseline beside its winner, in the run's own words where it recorded them."""
    outcome = _tune_outcome(run_dir)
    if outcome is None:
        return "no round-0 sweep record"
    b = outcome.baseline
    if b is not None and b.shapes and device is not None and not same_gpu_text(b.device, device):
        return f"the sweep ran on {b.device}, the winner's times are from {device}"
    return (outcome.error or "the sweep recorded no shapes")[:300]


def shape_rows(result: EvalResult, sweep: dict[tuple[str, str], float] | None) -> list[ShapeRow]:
    t = result.timing
    if t is None:
        return []
    rows = []
    for s in t.shapes:
        rows.append(ShapeRow(dims=dict(s.dims), dtype=s.dtype, original_us=s.original_us,
                             sweep_us=(sweep or {}).get(_shape_key(s.dims, s.dtype)), best_us=s.candidate_us,
                             bound_us=copy_bound_us(s, t.copy_ceiling_gbps), speedup=s.speedup,
                             pct_of_bound=s.candidate_pct_ceiling, library=s.baseline_name,
                             library_us=s.baseline_us, served_by=s.served_by))
    return rows


def library_lines(rows: list[ShapeRow]) -> list[str]:
    """The winner against each library kernel the harness timed in the same run. Such a kernel is often what
    SGLang serves on some path (FlashInfer's, under some backend), so a speedup over the extracted original
    alone would overstate what a user sees there; where the op manifest does not say it serves a shape, the
    page says so instead of guessing."""
    timed = [r for r in rows if r.library and r.library_us]
    if not timed:
        return []
    ratios = [r.library_us / r.best_us if r.library_us and r.best_us else None for r in timed]
    body = [[r.name, str(r.library), f"{r.library_us:.2f}", _f(r.best_us, "{:.2f}"), _f(x),
             r.served_by or "not stated per shape (the op manifest's baseline `when` says where)"]
            for r, x in zip(timed, ratios)]
    body.append(["**geomean**", "", "", "", _f(geomean(ratios)), ""])
    return ["", "Library kernels timed beside the original in the same run (medians, interleaved):", ""] + _table(
        ["shape", "library kernel", "its us", "best us", "best vs it", "SGLang serves here"], body)


def copy_bound_us(shape: ShapeTiming, ceiling_gbps: float) -> float | None:
    """The time a device copy of the bytes this shape must move takes at the measured copy ceiling."""
    if not ceiling_gbps or ceiling_gbps <= 0 or shape.bytes_moved <= 0:
        return None
    return shape.bytes_moved / (ceiling_gbps * 1e3)


def geomean(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None and v > 0]
    if not vals or len(vals) != len(values):
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


# ------------------------------------------------------------------------------------------------ figures


def progress_figure(runs: list[RunReport]) -> Figure:
    """Best-so-far geomean speedup per round, one line per run (labelled with its recorded label)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 4.0))
    for run in (r for r in runs if r.records):
        pts = run.best_so_far()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=_legend(run))
    ax.axhline(1.0, color="gray", linestyle="--", linewidth=1)
    ax.set_xlabel("round")
    ax.set_ylabel("best geomean speedup so far")
    ax.set_title("best speedup so far per round", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def shapes_figure(run: RunReport) -> Figure:
    """The winner per shape: speedup over the original, and % of the copy bound (100% = a device copy)."""
    import matplotlib.pyplot as plt

    names = [r.name for r in run.rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(max(6.0, 1.2 * len(names) + 3), 4.2))
    xs = list(range(len(names)))
    left.bar(xs, [r.speedup or 0.0 for r in run.rows], color="tab:green")
    left.axhline(1.0, color="gray", linestyle="--", linewidth=1)
    left.set_ylabel("speedup vs original")
    right.bar(xs, [r.pct_of_bound or 0.0 for r in run.rows], color="tab:blue")
    right.axhline(100.0, color="gray", linestyle="--", linewidth=1)
    right.set_ylabel("% of copy bound")
    for ax in (left, right):
        ax.set_xticks(xs)
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=7)
    fig.suptitle(f"{run.name}: winner per shape\n{run.meta.label or ''}".strip(), fontsize=9)
    fig.tight_layout()
    return fig


def _legend(run: RunReport) -> str:
    label = run.meta.label or "no label"
    return f"{run.name} ({label[:40]}{'...' if len(label) > 40 else ''})" + ("" if run.timed else " [untimed]")


def _save(fig: Figure, path: Path) -> None:
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------------------------- markdown


def _f(x: float | None, fmt: str = "{:.3f}", missing: str = "-") -> str:
    return missing if x is None else fmt.format(x)


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in row) + " |" for row in rows]
    return out + [""]


def _reported(t: TokenCount) -> bool:
    """Requests made but no token counted is a provider that reports no usage (the file: provider), not a model
    that read and wrote nothing: the MODEL RUN report of 2026-12-04 said "0 in / 0 out" for hours of answers."""
    return bool(t.requests) and bool(t.input_tokens or t.output_tokens)


def _pair(t: TokenCount, missing: str) -> str:
    return f"{t.input_tokens}/{t.output_tokens}" if _reported(t) else missing


def _tokens(steps: list[StepRecord]) -> str:
    t = [s.tokens for s in steps if _reported(s.tokens)]
    if not t:
        return "not reported by the model provider" if any(s.tokens.requests for s in steps) else "not reported"
    return f"{sum(x.input_tokens for x in t)} in / {sum(x.output_tokens for x in t)} out"


def run_section(run: RunReport) -> list[str]:
    m = run.meta
    done = [r for r in run.records if r.round > 0]
    lines = [f"## {run.name}", ""]
    lines += _table(["", ""], [
        ["op", f"{m.op} ({canonical_op_id(m.op_id)})"], ["label", m.label or "(no label recorded)"], ["model", m.model],
        ["mode", run.mode], ["rounds", f"{len(done)} run of {m.rounds} planned"],
        ["status", m.status + (f": {m.message}" if m.message else "")],
        ["stopped early", m.stop_reason or "no"],
        ["wall time", f"{sum(s.wall_s for s in run.steps):.1f} s over {len(run.steps)} steps"],
        ["tokens", _tokens(run.steps)], ["run folder", str(run.folder.path)]])
    lines += ["### Best speedup per round", ""]
    so_far = dict(run.best_so_far())
    if not run.timed:
        lines += ["Untimed: no candidate was timed, so the verdicts here are correctness only.", ""]
    mixed = mixed_gpus_note(flat(run.records))
    if mixed:
        lines += [f"Note: {mixed}.", ""]
    gpu, speeds = speed_on_ranking_gpu(run.records)
    per_round = dict(best_per_round(run.records))
    rows = []
    for r in run.records:
        if r.round == 0:
            continue
        entries = r.entries()
        tried = ", ".join(f"{'c' + str(e.candidate) + ' ' if e.candidate is not None else ''}{e.status}"
                          + (f" {e.geomean_speedup:.3f}x" if e.geomean_speedup is not None else "")
                          + (f" ({gpu_of(e)}" + _retimed(e, gpu, speeds.get(id(e))) + ")" if mixed and gpu_of(e)
                             else "") for e in entries)
        none = "none timed and correct" + (f" on {gpu}" if mixed else "")
        rows.append([str(r.round), str(len(entries)), tried, _f(per_round.get(r.round), missing=none),
                     _f(so_far.get(r.round)) if run.timed else "untimed", f"{r.wall_s:.1f}",
                     _pair(r.tokens, "not reported")])
    where = f" (on {gpu})" if mixed else ""
    lines += _table(["round", "candidates", "verdicts", f"round best{where}", f"best so far{where}", "wall s",
                     "tokens in/out"], rows)
    lines += ["### Wall time per step", ""]
    lines += _table(["round", "candidate", "step", "agent", "attempt", "status", "wall s", "tokens in/out",
                     "speedup"],
                    [[str(s.round), "-" if s.candidate is None else str(s.candidate), s.step, s.agent, str(s.attempt),
                      s.status, f"{s.wall_s:.2f}",
                      _pair(s.tokens, "-"),
                      _f(s.speedup)] for s in run.steps])
    return lines


def _retimed(e: RoundRecord, gpu: str | None, there: float | None) -> str:
    """'; 1.534x re-timed on <gpu>' for a kernel timed on another GPU than the ranking one and re-timed there."""
    own = gpu_of(e)
    if gpu is None or there is None or (own is not None and same_gpu(own, gpu)):
        return ""
    return f"; {there:.3f}x re-timed on {gpu}"


def winner_section(run: RunReport, png: str | None) -> list[str]:
    w = run.meta.winner
    lines = [f"### Winner of {run.name}", ""]
    if w is None or w.round is None:
        return lines + [f"No winner: {w.reason if w else 'the run did not finish'}.", ""]
    which = f"round {w.round}" + (f", candidate {w.candidate}" if w.candidate is not None else "")
    lines += [f"{which}: {w.geomean_speedup:.3f}x geomean on the test shapes, held-out "
              f"{'confirmed' if w.heldout_ok else 'not confirmed'}; times from: {w.timing_source or 'unknown'}.", ""]
    if not run.rows:
        return lines + ["The winner's result has no per-shape timing.", ""]
    if run.sweep is None:
        lines += [f"Sweep baseline: not measured in this run on the winner's GPU "
                  f"({sweep_missing(run.folder.path, run.best.device if run.best else None)}).", ""]
    rows = [[r.name, f"{r.original_us:.2f}", _f(r.sweep_us, "{:.2f}", NOT_MEASURED), _f(r.best_us, "{:.2f}"),
             _f(r.bound_us, "{:.2f}"), _f(r.speedup), _f(r.pct_of_bound, "{:.1f}%")] for r in run.rows]
    rows.append(["**geomean**", "", "", "", "", _f(geomean([r.speedup for r in run.rows])),
                 _f(geomean([r.pct_of_bound for r in run.rows]), "{:.1f}%")])
    lines += _table(["shape", "original us", "sweep baseline us", "best us", "copy bound us", "speedup",
                     "% of copy bound"], rows)
    compared = [r for r in run.rows if r.sweep_us is not None and r.best_us is not None]
    if compared:
        lost = [r.name for r in compared if r.best_us >= r.sweep_us]  # type: ignore[operator]
        lines += ["", "The winner beats the sweep baseline on every shape it was measured on." if not lost else
                  f"The winner does NOT beat the sweep baseline on {len(lost)} of {len(compared)} shapes: "
                  f"{', '.join(lost)}."]
    lines += library_lines(run.rows)
    if png:
        lines += [f"![{run.name} per shape]({png})", ""]
    return lines


def unfinished_section(run: RunReport) -> list[str]:
    """A run reported beside others before its first round finished: its status, so nobody reads it as lost."""
    m = run.meta
    return [f"## {run.name}", "", f"No finished round yet (status {m.status}{': ' + m.message if m.message else ''}); "
            f"run folder {run.folder.path}.", ""]


def default_out(runs: list[RunReport]) -> Path:
    """Where the page goes without ``--out``: inside the run folder for one run, else in the folder that holds
    all the runs (``runs/<op>/`` for runs of one op, ``runs/`` for several ops), never the current directory."""
    folders = [str(r.folder.path.resolve()) for r in runs]
    return Path(folders[0] if len(set(folders)) == 1 else os.path.commonpath(folders)) / REPORT_NAME


def write_report(runs: list[RunReport], out: Path) -> tuple[Path, list[Path]]:
    """The page at ``out`` and its PNGs beside it (matplotlib, Agg); returns both."""
    import matplotlib

    matplotlib.use("Agg")
    out = Path(out)
    stem = out.with_suffix("")
    pngs: list[Path] = []
    progress = stem.with_name(stem.name + "-progress.png")
    _save(progress_figure(runs), progress)
    pngs.append(progress)
    lines = ["# astra-sglang optimizer runs", "",
             "Labels are as recorded by each run: a scripted run's candidates were written by developers, not found "
             "by a model.", ""]
    lines += _table(["run", "label", "model", "mode", "rounds", "best speedup"],
                    [[r.name, r.meta.label or "(no label recorded)", r.meta.model, r.mode,
                      str(len([x for x in r.records if x.round > 0])), r.best_speedup()] for r in runs])
    lines += [f"![best speedup so far per round]({progress.name})", ""]
    for n, run in enumerate(runs):
        if not run.records:
            lines += unfinished_section(run)
            continue
        lines += run_section(run)
        png = None
        if run.rows:
            path = stem.with_name(f"{stem.name}-shapes-{n}-{run.meta.op}.png")
            _save(shapes_figure(run), path)
            pngs.append(path)
            png = path.name
        lines += winner_section(run, png)
    atomic_write(out, "\n".join(lines).rstrip() + "\n")
    return out, pngs
