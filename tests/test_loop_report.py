"""``astra-sglang report``: the page, its tables and its plots, read back from the figures' data.

The two run folders are written with the loop's own on-disk schemas (RunFolder, RunMeta, RoundRecord,
StepRecord, EvalResult) and are labelled SCRIPTED: their times were not measured (``INJECTED BY TEST``), this
host has no GPU. What is tested is what the report makes of what a run recorded.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_sglang.agents.config import TokenCount
from astra_sglang.cli.main import main
from astra_sglang.contract.result import (
    BaselineShape,
    BuildReport,
    CorrectnessReport,
    EvalResult,
    ShapeTiming,
    SweepBaseline,
    TimingReport,
)
from astra_sglang.loop.records import LoopOptions, RoundRecord, RunMeta, StepRecord, TuneOutcome, WinnerInfo
from astra_sglang.loop.report import load_run, progress_figure, shapes_figure
from astra_sglang.loop.runfolder import RunFolder, atomic_write, now_iso

pytest.importorskip("matplotlib")
INJECTED = "INJECTED BY TEST: no GPU on this host, not a measurement"
SHAPES = [({"T": 5, "NH": 3, "D": 64}, 10.0, 5.0), ({"T": 64, "NH": 8, "D": 128}, 8.0, 4.0)]
BYTES, CEILING = 1_000_000, 1000.0  # copy bound 1.0 us per shape


def _times(speedup_div: float = 1.0) -> list[ShapeTiming]:
    out = []
    for dims, orig, cand in SHAPES:
        cand = cand * speedup_div
        gbps = BYTES / (cand * 1e3)
        out.append(ShapeTiming(dims=dims, dtype="bfloat16", original_us=orig, candidate_us=cand, spread_pct=1.0,
                               speedup=orig / cand, verdict="faster", bytes_moved=BYTES,
                               original_gbps=BYTES / (orig * 1e3), candidate_gbps=gbps,
                               original_pct_ceiling=100 * BYTES / (orig * 1e3) / CEILING,
                               candidate_pct_ceiling=100 * gbps / CEILING))
    return out


def _make_run(runs: Path, run_id: str, label: str, k: int, per_round: list[list[tuple[str, float | None]]],
              winner: tuple[int, int | None, float], sweep: bool, gpus: list[str] | None = None) -> Path:
    """``gpus``: the GPU each candidate of a round was timed on (by candidate index), as the queue reported it."""
    folder = RunFolder.create(runs, "merge_state", run_id)
    folder.finish_round(RoundRecord(round=0, status="ok", correct=True, label=label))
    for i, cands in enumerate(per_round, 1):
        entries = [RoundRecord(round=i, candidate=j if k > 1 else None, status=status,  # type: ignore[arg-type]
                               correct=status == "ok", geomean_speedup=speed, label=label,
                               timing_source=f"{gpus[j]} (sm_90); {INJECTED}" if gpus else INJECTED,
                               tokens=TokenCount(requests=1, input_tokens=100, output_tokens=20), wall_s=1.5)
                   for j, (status, speed) in enumerate(cands)]
        best = max(entries, key=lambda e: e.geomean_speedup if e.correct and e.geomean_speedup else 0.0)
        rec = best.model_copy(update={"candidates": entries if k > 1 else []})
        folder.finish_round(rec)
        for e in entries:
            folder.append_step(StepRecord(round=i, step="coding", agent="coding", started=now_iso(), wall_s=1.5,
                                          tokens=e.tokens, status="ok", candidate=e.candidate))
    rnd, cand, speed = winner
    meta = RunMeta(run_id=run_id, op="merge_state", op_id="attention.merge_state_triton", op_dir="extracted/x",
                   model="o4-mini (scripted fake server)", rounds=len(per_round), mode="multi-agent",
                   created=now_iso(), updated=now_iso(), status="done", label=label,
                   options=LoopOptions(candidates=k, label=label),
                   winner=WinnerInfo(round=rnd, candidate=cand, reason="best", geomean_speedup=speed,
                                     heldout_ok=True, timing_source=INJECTED))
    folder.write_meta(meta)
    div = 2.0 / speed  # the winner's per-shape times give its geomean
    result = EvalResult(op_id=meta.op_id, device=f"cpu + {INJECTED}", sglang_version="0.5.23",
                        build=BuildReport(ok=True), correctness=CorrectnessReport(ok=True, cases_run=9),
                        timing=TimingReport(method=INJECTED, copy_ceiling_gbps=CEILING, shapes=_times(div),
                                            geomean_speedup=speed))
    atomic_write(folder.best_dir / "result.json", result.model_dump_json())
    if sweep:  # what the optimizer's round 0 writes: the tune step's TuneOutcome
        folder.save_step(0, "tune", TuneOutcome(baseline=SweepBaseline(
            op_id=meta.op_id, sglang_version="0.5.23", device=f"cpu + {INJECTED}", parameters={"num_warps": [1, 4]},
            original_config={"num_warps": "4"}, configs=[], shapes=[
                BaselineShape(dims=d, dtype="bfloat16", original_us=o, best_config={"num_warps": 1}, best_us=b,
                              speedup=o / b) for (d, o, _), b in zip(SHAPES, (7.5, 3.5))])))
    else:
        folder.save_step(0, "tune", TuneOutcome(error="merge_state: nothing to sweep (scripted)"))
    return folder.path


@pytest.fixture()
def two_runs(tmp_path: Path) -> tuple[Path, Path]:
    runs = tmp_path / "runs"
    a = _make_run(runs, "k4", "SCRIPTED run A (tests), not a model", 4,
                  [[("build_failed", None), ("incorrect", 5.0), ("ok", 1.5), ("ok", 1.2)],
                   [("ok", 0.9), ("ok", 1.4), ("failed", None), ("ok", 1.1)],
                   [("ok", 2.0), ("incorrect", 3.0), ("ok", 1.0), ("ok", 0.5)]], (3, 0, 2.0), sweep=True)
    b = _make_run(runs, "k1", "SCRIPTED run B (tests), not a model", 1,
                  [[("ok", 1.25)], [("incorrect", 4.0)]], (1, None, 1.25), sweep=False)
    return a, b


def test_report_page_tables_and_plots(two_runs: tuple[Path, Path], tmp_path: Path, capsys):
    a, b = two_runs
    out = tmp_path / "site" / "report.md"
    assert main(["report", str(a), str(b), "--out", str(out)]) == 0
    page = out.read_text()
    printed = capsys.readouterr().out
    pngs = sorted(out.parent.glob("*.png"))
    assert len(pngs) == 3 and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert all(p.name in page and str(p) in printed for p in pngs)

    # Per run: label as recorded, model, mode, rounds, the best per round and per step costs.
    assert "| label | SCRIPTED run A (tests), not a model |" in page
    assert "| mode | multi-agent, K=4 candidates a round |" in page and "multi-agent, K=1 candidate a round" in page
    assert "| model | o4-mini (scripted fake server) |" in page and "| rounds | 3 run of 3 planned |" in page
    assert ("| 1 | 4 | c0 build_failed, c1 incorrect 5.000x, c2 ok 1.500x, c3 ok 1.200x | 1.500 | 1.500 | 1.5 | "
            "100/20 |") in page  # the wrong one's 5x is not the round's best
    assert "| 2 | 4 | c0 ok 0.900x, c1 ok 1.400x, c2 failed, c3 ok 1.100x | 1.400 | 1.500 |" in page
    assert "| 2 | 1 | incorrect 4.000x | none timed and correct | 1.250 |" in page
    assert "| 1 | 2 | coding | coding | 0 | ok | 1.50 | 100/20 | - |" in page
    assert "| tokens | 1200 in / 240 out |" in page

    # Per winner: original / sweep / best / copy bound per shape, speedup, % of the bound, geomean.
    assert "round 3, candidate 0: 2.000x geomean" in page
    assert "| T=5,NH=3,D=64 bfloat16 | 10.00 | 7.50 | 5.00 | 1.00 | 2.000 | 20.0% |" in page
    assert "| T=64,NH=8,D=128 bfloat16 | 8.00 | 3.50 | 4.00 | 1.00 | 2.000 | 25.0% |" in page
    # the sweep of the original's own tunables is faster there: said, per shape
    assert "The winner does NOT beat the sweep baseline on 1 of 2 shapes: T=64,NH=8,D=128 bfloat16." in page
    assert "| **geomean** |  |  |  |  | 2.000 | 22.4% |" in page
    assert "| T=5,NH=3,D=64 bfloat16 | 10.00 | not measured | 8.00 | 1.00 | 1.250 | 12.5% |" in page
    assert "Sweep baseline: not measured in this run on the winner's GPU (merge_state: nothing to sweep (scripted))." in page
    assert INJECTED in page

    # The figures' data, not just their files.
    runs = [load_run(a), load_run(b)]
    fig = progress_figure(runs)
    lines = {str(ln.get_label()): [float(y) for y in ln.get_ydata()]  # type: ignore[union-attr, arg-type]
             for ln in fig.axes[0].lines if not str(ln.get_label()).startswith("_")}
    assert lines == {"merge_state/k4 (SCRIPTED run A (tests), not a model)": [1.0, 1.5, 1.5, 2.0],
                     "merge_state/k1 (SCRIPTED run B (tests), not a model)": [1.0, 1.25, 1.25]}
    from matplotlib.patches import Rectangle

    left, right = shapes_figure(runs[0]).axes
    assert [round(p.get_height(), 6) for p in left.patches if isinstance(p, Rectangle)] == [2.0, 2.0]
    assert [round(p.get_height(), 6) for p in right.patches if isinstance(p, Rectangle)] == [20.0, 25.0]
    assert [t.get_text() for t in left.get_xticklabels()] == ["T=5,NH=3,D=64 bfloat16", "T=64,NH=8,D=128 bfloat16"]


def test_a_run_timed_on_two_gpus_says_so_beside_each_speedup(tmp_path: Path):
    """The device pool gave one K=4 round an H200 for c0 and an H100 for c1-c3 (2026-12-05): each speedup is against
    SGLang's kernel on its own GPU, so the page names the GPU of each and says the ranking is not like for like."""
    run = _make_run(tmp_path / "runs", "mixed", "SCRIPTED mixed-GPU run (tests), not a model", 4,
                    [[("ok", 1.2), ("ok", 1.3), ("incorrect", 2.0), ("ok", 0.7)]], (1, 1, 1.3), sweep=False,
                    gpus=["NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"])
    out = tmp_path / "site" / "report.md"
    assert main(["report", str(run), "--out", str(out)]) == 0
    page = out.read_text()
    assert ("Note: candidates were timed on 2 GPUs (NVIDIA H200, NVIDIA H100 80GB HBM3): each speedup is against "
            "SGLang's kernel on its own GPU, and ratios from different GPUs are not like for like, so the ranking "
            "uses times from NVIDIA H100 80GB HBM3 only (the latest), with the kernels that compete re-timed there; "
            "not competing, timed only on another GPU: round 1 candidate 0.") in page
    assert ("c0 ok 1.200x (NVIDIA H200), c1 ok 1.300x (NVIDIA H100 80GB HBM3), c2 incorrect 2.000x (NVIDIA H100 80GB "
            "HBM3), c3 ok 0.700x (NVIDIA H100 80GB HBM3) | 1.300 |") in page  # the round's best on the H100
    assert "| 1 | 1.300x on NVIDIA H100 80GB HBM3 |" in page  # the summary's best names the GPU it ranks on


def test_a_run_timed_on_one_gpu_has_no_such_note(two_runs: tuple[Path, Path], tmp_path: Path):
    out = tmp_path / "site" / "report.md"
    assert main(["report", str(two_runs[0]), "--out", str(out)]) == 0
    assert "timed on 2 GPUs" not in out.read_text() and "(NVIDIA" not in out.read_text()


def test_report_bad_input_is_one_line(tmp_path: Path, capsys):
    assert main(["report", str(tmp_path / "nothing-here"), "--out", str(tmp_path / "r.md")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nothing-here" in err[0] and "Traceback" not in err[0]

    folder = RunFolder.create(tmp_path / "runs", "merge_state", "empty")
    folder.write_meta(RunMeta(run_id="empty", op="merge_state", op_id="x", op_dir="x", model="m", rounds=1,
                              mode="multi-agent", created=now_iso(), updated=now_iso(), options=LoopOptions()))
    assert main(["report", str(folder.path), "--out", str(tmp_path / "r.md")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no finished round" in err[0]
    assert not (tmp_path / "r.md").exists()


def test_report_shows_the_winner_against_library_kernels_timed_beside_it(two_runs: tuple[Path, Path],
                                                                         tmp_path: Path):
    """A 2x over SGLang's Triton original can be 1.07x over the FlashInfer kernel SGLang's FlashInfer backend
    serves at the same shapes (merge_state on the H200, 2026-12-02): the page must show both, and must not
    claim the library kernel is served where the op manifest does not say so per shape."""
    a, _ = two_runs
    best = RunFolder(a).best_dir / "result.json"
    result = EvalResult.model_validate_json(best.read_text())
    assert result.timing is not None
    first, second = result.timing.shapes  # best 5.0 us and 4.0 us (INJECTED)
    result.timing.shapes = [first.model_copy(update={"baseline_name": "flashinfer_x", "baseline_us": 6.0}),
                            second.model_copy(update={"baseline_name": "flashinfer_x", "baseline_us": 5.0,
                                                      "served_by": "flashinfer_x", "served_us": 5.0,
                                                      "served_speedup": 1.25})]
    atomic_write(best, result.model_dump_json())
    out = tmp_path / "r.md"
    assert main(["report", str(a), "--out", str(out)]) == 0
    page = out.read_text()
    assert "| T=5,NH=3,D=64 bfloat16 | flashinfer_x | 6.00 | 5.00 | 1.200 | not stated per shape" in page
    assert "| T=64,NH=8,D=128 bfloat16 | flashinfer_x | 5.00 | 4.00 | 1.250 | flashinfer_x |" in page
    assert "| **geomean** |  |  |  | 1.225 |  |" in page
    # the main table still reads against the original
    assert "| T=5,NH=3,D=64 bfloat16 | 10.00 | 7.50 | 5.00 | 1.00 | 2.000 | 20.0% |" in page


def test_report_without_library_kernels_has_no_such_table(two_runs: tuple[Path, Path], tmp_path: Path):
    out = tmp_path / "r.md"
    assert main(["report", str(two_runs[0]), "--out", str(out)]) == 0
    assert "Library kernels timed beside" not in out.read_text()


def test_a_provider_that_reports_no_usage_is_not_shown_as_zero_tokens(tmp_path: Path):
    """The file: provider answers without usage: its MODEL RUN read "0 in / 0 out" over hours of answers."""
    from astra_sglang.loop.report import _pair, _tokens

    silent = StepRecord(round=1, step="coding", agent="coding", status="ok", wall_s=1.0, started="t",
                        tokens=TokenCount(requests=3, input_tokens=0, output_tokens=0))
    counted = StepRecord(round=1, step="coding", agent="coding", status="ok", wall_s=1.0, started="t",
                         tokens=TokenCount(requests=1, input_tokens=100, output_tokens=20))
    assert _tokens([silent]) == "not reported by the model provider"
    assert _tokens([silent, counted]) == "100 in / 20 out"
    assert _pair(silent.tokens, "-") == "-" and _pair(counted.tokens, "-") == "100/20"
