"""The sweep baseline in the loop: the queue's tune item, the CPU fallback, and what the final tables say."""

from __future__ import annotations

from pathlib import Path

import pytest
from loop_support import merge_sweep_baseline
from rich.console import Console

from astra_sglang.contract.result import ShapeTiming, SweepBaseline
from astra_sglang.loop.evaluator import (
    REQUEST_NAME,
    TUNE_RESULT_NAME,
    EvalPending,
    LocalEvaluator,
    QueueEvaluator,
    list_queue,
    process_queue,
    queue_status,
)
from astra_sglang.loop.records import EvalSpec, QueueRequest, RoundRecord, TuneOutcome, WinnerInfo
from astra_sglang.loop.view import final_table, shape_table

DIMS = {"T": 512, "NH": 40, "D": 128}


def _baseline(speedup: float) -> SweepBaseline:
    return merge_sweep_baseline(speedup)

def _row(us: float, cand: float | None = None) -> ShapeTiming:
    return ShapeTiming(dims=DIMS, dtype="bfloat16", original_us=us, candidate_us=cand, spread_pct=1.0,
                       speedup=us / cand if cand else None, bytes_moved=15_728_640, original_gbps=1572.9,
                       original_pct_ceiling=40.0)


def _render(table) -> str:
    console = Console(width=200, record=True)
    console.print(table)
    return console.export_text()


def test_a_winner_that_does_not_beat_the_sweep_baseline_says_so_and_the_shape_table_has_all_four():
    r0 = RoundRecord(round=0, status="ok", correct=True, times=[_row(10.0)],
                     sweep_baseline=TuneOutcome(baseline=_baseline(1.25)))
    r1 = RoundRecord(round=1, status="ok", correct=True, geomean_speedup=1.1, times=[_row(10.0, 9.09)])
    winner = WinnerInfo(round=1, reason="best", geomean_speedup=1.1, heldout_ok=True,
                        timing_source="NVIDIA H200 (sm_90); cuda-graph replay")
    text = _render(final_table([r0, r1], winner, "t"))
    assert "does NOT beat the sweep baseline (1.250x" in text
    shapes = _render(shape_table([r0, r1], winner))
    for col in ("original", "sweep baseline", "best candidate", "copy bound"):
        assert col in shapes
    # copy bound = bytes / ceiling, ceiling = 1572.9 GB/s / 40% = 3932 GB/s -> 4.00 us
    assert "512x40x128" in shapes and "8.00 (1.25x)" in shapes and "9.09 (1.10x)" in shapes and "4.00" in shapes
    r0_better = r0.model_copy(update={"sweep_baseline": TuneOutcome(baseline=_baseline(1.05))})
    assert "the winner beats the sweep baseline" in _render(final_table([r0_better, r1], winner, "t"))
    # a winner timed on another GPU than the sweep is not set against it: ratios over SGLang differ by GPU
    h100 = winner.model_copy(update={"timing_source": "NVIDIA H100 80GB HBM3 (sm_90); cuda-graph replay"})
    cross = " ".join(_render(final_table([r0_better, r1], h100, "t")).split())
    assert "beat" not in cross and "1.050x on NVIDIA H200 (sm_90); the winner was timed on NVIDIA H100" in cross
    assert "not compared" in cross


def test_without_timing_the_op_folder_s_baseline_is_used_or_reported_missing(tmp_path):
    from loop_support import merge_state_dir

    op = merge_state_dir(tmp_path)
    spec = EvalSpec(shapes="test", device="cpu")
    if (op / "tune_baseline.json").is_file():
        pytest.skip("this checkout holds a measured tune_baseline.json")
    missing = LocalEvaluator(op).sweep_baseline(spec)
    assert missing.baseline is None and missing.error and "missing" in missing.error and "astra-sglang tune" in missing.error


def test_the_queue_carries_a_tune_job_to_the_gpu_host(tmp_path, restored_op):
    op = restored_op("merge_state")
    queue = tmp_path / "queue"
    spec = EvalSpec(shapes="paper", device="auto")
    ev = QueueEvaluator(op, queue, "run1")
    with pytest.raises(EvalPending) as pending:
        ev.sweep_baseline(spec)
    assert pending.value.items == ["run1--r000-tune"]
    item = queue / "run1--r000-tune"
    assert QueueRequest.model_validate_json((item / REQUEST_NAME).read_text()).job == "tune"
    assert queue_status(queue) == {"pending": 1, "done": 0}
    # what `evaluate QUEUE` writes on the GPU host: the loop reads it back
    (item / TUNE_RESULT_NAME).write_text(TuneOutcome(baseline=_baseline(1.2)).model_dump_json())
    got = ev.sweep_baseline(spec)
    assert got.baseline is not None and got.baseline.geomean_speedup == pytest.approx(1.2)
    assert queue_status(queue) == {"pending": 0, "done": 1} and isinstance(list_queue(queue)[0][2], TuneOutcome)


def test_the_gpu_host_answers_a_tune_job_for_an_op_with_nothing_to_sweep_with_one_line(tmp_path, restored_op):
    op = restored_op("fused_add_rmsnorm")
    queue = tmp_path / "queue"
    with pytest.raises(EvalPending):
        QueueEvaluator(op, queue, "run2").sweep_baseline(EvalSpec(shapes="paper", device="auto"))
    assert process_queue(queue, Path(op).parent) == []  # no EvalResult: the tune answer is its own file
    out = TuneOutcome.model_validate_json((queue / "run2--r000-tune" / TUNE_RESULT_NAME).read_text())
    assert out.baseline is None and out.error and "exposes no launch or template parameters" in out.error


def test_a_round_of_k_candidates_shares_one_sweep_budget(tmp_path, restored_op):
    """Four candidates a round may declare 16 TUNE points each (64 shared): the coding agent's check says so
    before the GPU trip, and the GPU host refuses the same source the same way; one candidate keeps all 64."""
    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.harness import evaluate_many
    from astra_sglang.harness.parent.tune_space import tune_cap

    assert (tune_cap(1), tune_cap(2), tune_cap(4), tune_cap(16)) == (64, 32, 16, 8)
    op = restored_op("merge_state")
    cand = Path(__file__).parent / "candidates" / "merge_state" / "tunable" / "rows_x_warps.py"  # 24 points
    k4 = EvalSpec(shapes="test", device="cpu", harness={"max_tune_configs": tune_cap(4)})
    report = QueueEvaluator(op, tmp_path / "queue", "run1").check(cand, k4)
    assert not report.built and report.how == "static"
    assert "TUNE declares 24 configs, more than the cap of 16 a candidate has in a round of several" in report.log
    assert not (tmp_path / "queue").exists() or not any((tmp_path / "queue").iterdir())  # nothing went to the GPU
    (res,) = evaluate_many(op, [cand], EvalConfig(shapes="test", device="cpu", max_tune_configs=16))
    assert not res.build.ok and "more than the cap of 16" in (res.error or "")
    assert QueueEvaluator(op, tmp_path / "queue", "run2").static(cand, k4.model_copy(update={"harness": {}})) is None


def test_a_gpu_measured_tune_baseline_of_the_same_shapes_is_used_instead_of_queueing_the_sweep_again(
        tmp_path, restored_op):
    """Two runs sharing a queue after `astra-sglang tune` spent a GPU pass each re-sweeping the original (64
    configs for decode_attention); the op folder's sweep of the same shapes and L2 mode is the same bar."""
    import shutil

    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.contract.op import load_manifest
    from astra_sglang.harness.shared.suite import timed_shapes

    op = tmp_path / "merge_state"
    shutil.copytree(restored_op("merge_state"), op)
    manifest = load_manifest(op)
    paper = timed_shapes(manifest, EvalConfig(shapes="paper"))
    one = merge_sweep_baseline(1.3)
    measured = one.model_copy(update={
        "method": "NVIDIA H200: each config in one worker, ABBA against the original, cold L2",
        "shapes": [one.shapes[0].model_copy(update={"dims": d}) for d in paper]})
    (op / "tune_baseline.json").write_text(measured.model_dump_json())
    queue = tmp_path / "queue"
    got = QueueEvaluator(op, queue, "run1").sweep_baseline(EvalSpec(shapes="paper", device="auto"))
    assert got.baseline is not None and got.baseline.geomean_speedup == pytest.approx(1.3)
    assert not queue.exists() or queue_status(queue) == {"pending": 0, "done": 0}
    # another L2 mode, or other shapes, is another sweep: it goes to the GPU host
    with pytest.raises(EvalPending):
        QueueEvaluator(op, queue, "run2").sweep_baseline(EvalSpec(shapes="paper", device="auto", mode="warm"))
    (op / "tune_baseline.json").write_text(measured.model_copy(update={"shapes": measured.shapes[:1]}).model_dump_json())
    with pytest.raises(EvalPending):
        QueueEvaluator(op, queue, "run3").sweep_baseline(EvalSpec(shapes="paper", device="auto"))


def test_runs_sharing_a_queue_get_one_sweep_of_the_original(tmp_path, restored_op, monkeypatch):
    """The GPU pass answers the second run's tune job from the sweep it just made (kept in the op folder)."""
    import shutil

    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.contract.op import load_manifest
    from astra_sglang.harness.shared.suite import timed_shapes
    from astra_sglang.loop import evaluator

    root = tmp_path / "extracted"
    op = root / "merge_state"
    shutil.copytree(restored_op("merge_state"), op)
    (op / "tune_baseline.json").unlink(missing_ok=True)
    paper = timed_shapes(load_manifest(op), EvalConfig(shapes="paper"))
    one = merge_sweep_baseline(1.3)
    measured = one.model_copy(update={"method": "NVIDIA H200: ABBA, cold L2",
                                      "shapes": [one.shapes[0].model_copy(update={"dims": d}) for d in paper]})
    sweeps = []
    monkeypatch.setattr(evaluator, "run_tune", lambda op_dir, config, partial=None: sweeps.append(op_dir) or TuneOutcome(
        baseline=measured))
    queue = tmp_path / "queue"
    for run in ("runA", "runB"):
        with pytest.raises(EvalPending):
            QueueEvaluator(op, queue, run).sweep_baseline(EvalSpec(shapes="paper", device="auto"))
    process_queue(queue, root)
    assert len(sweeps) == 1 and (op / "tune_baseline.json").is_file()
    for run in ("runA", "runB"):
        got = TuneOutcome.model_validate_json((queue / f"{run}--r000-tune" / TUNE_RESULT_NAME).read_text())
        assert got.baseline is not None and got.baseline.geomean_speedup == pytest.approx(1.3)


def test_the_sweep_of_the_original_is_not_refused_by_the_candidate_screen(tmp_path, restored_op, monkeypatch):
    """SGLang's decode_attention.py imports logging and sglang.srt.utils: the candidate screen refused all 64
    variants of it on the H200 (2026-12-04), so there was no sweep baseline. The variants are SGLang's source."""
    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.contract.op import load_manifest
    from astra_sglang.contract.result import SweepConfig
    from astra_sglang.harness.parent import tune_baseline
    from astra_sglang.harness.parent.screen import screen_report

    op = restored_op("decode_attention")
    manifest = load_manifest(op)
    assert screen_report(op / manifest.recipe.source, op, manifest) is not None  # the original fails the screen
    seen = []

    def fake(op_dir, manifest, configs, sources, config, device, seed, progress, refusals_per_shape=False):
        seen.append((config.screen, refusals_per_shape))
        return [SweepConfig(config=c, ok=False, failure="not run") for c in configs], "", 0

    monkeypatch.setattr(tune_baseline, "sweep_variants", fake)
    with pytest.raises(Exception, match="no config of the original passed"):
        tune_baseline.sweep_baseline(op, EvalConfig(shapes="test", device="cpu", timing=False))
    # unscreened, and a config the GPU refuses at some shapes competes at the others (test_sweep.py)
    assert seen and set(seen) == {(False, True)}


def test_a_resumed_run_drops_proposed_cases_its_op_contract_no_longer_allows(tmp_path, restored_op):
    """MODEL RUN 2026-12-04 (Claude answering through the file: provider): the Testing agent proposed
    decode_attention at G = 17, where SGLang's grouped kernel is wrong, and the original failed its own round 0.
    The contract now says G <= 16; the run resumed from its cached suite must not run that case again."""
    from types import SimpleNamespace

    from astra_sglang.agents.schemas import DimValue, ProposedCase
    from astra_sglang.contract.op import load_manifest
    from astra_sglang.loop.optimizer import Optimizer
    from astra_sglang.loop.records import SuiteStep
    from astra_sglang.loop.runfolder import RunFolder

    op = restored_op("decode_attention")

    def case(g: int) -> ProposedCase:
        dims = dict(B=2, S=100, NK=2, G=g, D=64, P=1, R=1, X=1, MS=8)
        return ProposedCase(dims=[DimValue(name=k, value=v) for k, v in dims.items()], dtype="bfloat16",
                            distribution="normal", why="group size")

    folder = RunFolder(tmp_path / "run")
    folder.save_step(0, "suite", SuiteStep(accepted=[case(4), case(17)], used_by_harness=True, note="2 cases"))
    events: list[str] = []
    opt = Optimizer.__new__(Optimizer)
    opt.folder, opt.manifest = folder, load_manifest(op)
    opt.spec, opt.view = EvalSpec(shapes="paper"), SimpleNamespace(event=events.append)
    step = opt._suite_under_contract(folder.load_step(0, "suite", SuiteStep))
    assert [c.dims[3].value for c in step.accepted] == [4]
    assert any("G=17 outside its constraints" in r for r in step.rejected) and "dropped on resume" in step.note
    # proposed before kv_indices' graph form (dim KX) was added: kept, meaning what it meant (KX = 0, eager)
    assert {d.name: d.value for d in step.accepted[0].dims}["KX"] == 0
    assert folder.load_step(0, "suite", SuiteStep).accepted == step.accepted and events


def test_a_cut_tune_resumes_from_its_kept_chunks_and_sweeps_each_config_once(monkeypatch, tmp_path, restored_op):
    """decode_attention's 64-config sweep outlasted two 600 s H200 calls and kept nothing (2026-12-04): the
    finished chunks are kept, the next tune of the same sweep runs only the rest, with the same quick-case seed."""
    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.contract.result import SweepConfig
    from astra_sglang.harness.parent import tune_baseline

    op = restored_op("decode_attention")
    asked: list[tuple[str, int]] = []
    cut_after = [2]

    def fake(op_dir, manifest, configs, sources, config, device, seed, progress, refusals_per_shape=False):
        if cut_after[0] == 0:
            raise KeyboardInterrupt  # the device's time limit, mid-chunk
        cut_after[0] -= 1
        asked.extend((s.name, seed) for s in sources)
        return [SweepConfig(config=c, ok=True) for c in configs], "", 0

    monkeypatch.setattr(tune_baseline, "sweep_variants", fake)
    partial = tmp_path / "tune_baseline.partial.json"
    config = EvalConfig(shapes="test", device="cpu", timing=False)
    with pytest.raises(KeyboardInterrupt):
        tune_baseline.sweep_baseline(op, config, partial=partial, chunk=16)
    kept = tune_baseline.TunePartial.model_validate_json(partial.read_text())
    assert sorted(kept.done) == list(range(32))
    cut_after[0] = 99
    lines: list[str] = []
    base = tune_baseline.sweep_baseline(op, config, progress=lines.append, partial=partial, chunk=16)
    assert len(base.configs) == 64 and all(c.ok for c in base.configs)
    names = [n for n, _ in asked]
    assert len(names) == len(set(names)) == 64                     # every config swept exactly once
    assert len({s for _, s in asked}) == 1                          # one seed: the same quick cases for all
    assert any("resuming from" in x and "32 of 64" in x for x in lines)
    # another sweep (other shapes) never reuses the kept chunks
    asked.clear()
    tune_baseline.sweep_baseline(op, EvalConfig(shapes="test", device="cpu", timing=False, dtypes=["float16"]),
                                 progress=lines.append, partial=partial, chunk=64)
    assert len(asked) == 64 and any("another sweep" in x for x in lines)


def test_a_judge_that_dies_leaves_its_configs_undecided_and_says_what_is_kept(monkeypatch, tmp_path, restored_op):
    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.contract.result import SweepConfig
    from astra_sglang.errors import AstraError
    from astra_sglang.harness.parent import tune_baseline

    op = restored_op("decode_attention")
    calls = [0]

    def fake(op_dir, manifest, configs, sources, config, device, seed, progress, refusals_per_shape=False):
        calls[0] += 1
        if calls[0] == 2:
            return [SweepConfig(config=c, ok=False, failure="sweep died: killed") for c in configs], "", 0
        return [SweepConfig(config=c, ok=True) for c in configs], "", 0

    monkeypatch.setattr(tune_baseline, "sweep_variants", fake)
    partial = tmp_path / "p.partial.json"
    with pytest.raises(AstraError, match=r"judge failed on configs 17-32 of 64 \(sweep died: killed\); 16 of 64"):
        tune_baseline.sweep_baseline(op, EvalConfig(shapes="test", device="cpu", timing=False), partial=partial,
                                     chunk=16)
    assert sorted(tune_baseline.TunePartial.model_validate_json(partial.read_text()).done) == list(range(16))


def test_kept_chunks_of_another_gpu_are_never_mixed_into_one_baseline(monkeypatch, tmp_path, restored_op):
    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.contract.result import SweepConfig
    from astra_sglang.errors import AstraError
    from astra_sglang.harness.parent import tune_baseline

    op = restored_op("decode_attention")
    gpu = ["NVIDIA H100 (sm_90)"]

    def fake(op_dir, manifest, configs, sources, config, device, seed, progress, refusals_per_shape=False):
        if gpu[0] == "cut":
            raise KeyboardInterrupt
        return [SweepConfig(config=c, ok=True) for c in configs], gpu[0], 0

    monkeypatch.setattr(tune_baseline, "sweep_variants", fake)
    partial = tmp_path / "t.partial.json"
    config = EvalConfig(shapes="test", device="cpu", timing=False)

    def once_then_cut(*a, **k):  # type: ignore[no-untyped-def]
        out = fake(*a, **k)
        gpu[0] = "cut"
        return out

    monkeypatch.setattr(tune_baseline, "sweep_variants", once_then_cut)
    with pytest.raises(KeyboardInterrupt):
        tune_baseline.sweep_baseline(op, config, partial=partial, chunk=16)
    gpu[0] = "NVIDIA H200 (sm_90)"
    monkeypatch.setattr(tune_baseline, "sweep_variants", fake)
    with pytest.raises(AstraError, match="measured on NVIDIA H100 .sm_90., this run is on NVIDIA H200"):
        tune_baseline.sweep_baseline(op, config, partial=partial, chunk=16)


def test_a_sweep_cut_in_its_16th_config_keeps_the_configs_before_it(monkeypatch, tmp_path, restored_op):
    """decode_attention's sweep (64 configs) went to the judge 16 configs a worker; a device call's limit struck
    in config 16, ~230 s in, and kept nothing (2026-12-05, H100). With the default chunk only the last few are lost."""
    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.contract.result import SweepConfig
    from astra_sglang.harness.parent import tune_baseline

    op = restored_op("decode_attention")
    seen = [0]

    def fake(op_dir, manifest, configs, sources, config, device, seed, progress, refusals_per_shape=False):
        if seen[0] + len(configs) >= 16:
            raise KeyboardInterrupt  # the limit strikes while config 16 is timed
        seen[0] += len(configs)
        return [SweepConfig(config=c, ok=True) for c in configs], "", 0

    monkeypatch.setattr(tune_baseline, "sweep_variants", fake)
    partial = tmp_path / "tune_baseline.partial.json"
    with pytest.raises(KeyboardInterrupt):
        tune_baseline.sweep_baseline(op, EvalConfig(shapes="test", device="cpu", timing=False), partial=partial)
    kept = tune_baseline.TunePartial.model_validate_json(partial.read_text())
    assert len(kept.done) >= 12


def test_a_queue_sweep_keeps_one_partial_per_gpu_so_alternating_passes_both_progress(tmp_path, restored_op,
                                                                                      monkeypatch):
    """Queue passes alternate between H100s and H200s (2026-12-05). A sweep is keyed by its GPU, so one shared
    partial file was dropped as "another sweep" at every switch and decode_attention's 64-config sweep never
    finished; each GPU now resumes its own kept chunks."""
    import shutil

    from astra_sglang import platform_info
    from astra_sglang.loop import evaluator

    root = tmp_path / "extracted"
    op = root / "merge_state"
    shutil.copytree(restored_op("merge_state"), op)
    (op / "tune_baseline.json").unlink(missing_ok=True)
    given = []
    monkeypatch.setattr(evaluator, "run_tune", lambda op_dir, config, partial=None: given.append(partial) or TuneOutcome(
        error="cut by the pass's limit (scripted)"))
    queue = tmp_path / "queue"
    with pytest.raises(EvalPending):
        QueueEvaluator(op, queue, "runA").sweep_baseline(EvalSpec(shapes="paper", device="auto"))
    for gpu in ("NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA H200"):
        monkeypatch.setattr(platform_info, "current", lambda gpu=gpu: platform_info.Platform(arch="sm_90", name=gpu))
        (queue / "runA--r000-tune" / TUNE_RESULT_NAME).unlink(missing_ok=True)
        process_queue(queue, root)
    item = queue / "runA--r000-tune"
    assert given == [item / "baseline.nvidia-h200.partial.json", item / "baseline.nvidia-h100-80gb-hbm3.partial.json",
                     item / "baseline.nvidia-h200.partial.json"]


def test_a_sweep_only_pass_leaves_the_candidates_for_the_next_pass(tmp_path, restored_op, monkeypatch, capsys):
    """Sweeps run after every candidate, and decode_attention's never got a pass's time for three sessions
    (2026-12-05): `evaluate QUEUE --jobs tune` gives them one of their own; `--jobs evaluate` the reverse. The
    pass says what each sweep answered: it printed "evaluated 0" after two finished sweeps (H100, 2026-12-06)."""
    import shutil

    import astra_sglang.harness as harness
    from astra_sglang.cli.main import main
    from astra_sglang.loop import evaluator
    from astra_sglang.loop.evaluator import queue_status

    root = tmp_path / "extracted"
    op = root / "merge_state"
    shutil.copytree(restored_op("merge_state"), op)
    (op / "tune_baseline.json").unlink(missing_ok=True)
    swept: list[Path] = []
    monkeypatch.setattr(evaluator, "run_tune", lambda op_dir, config, partial=None: swept.append(op_dir) or TuneOutcome(
        error="nothing to sweep (scripted)"))

    def no_harness(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("a sweep-only pass evaluated a candidate")

    monkeypatch.setattr(harness, "evaluate_many", no_harness)
    queue = tmp_path / "queue"
    q = QueueEvaluator(op, queue, "runA")
    for ask in (lambda: q.sweep_baseline(EvalSpec(shapes="paper", device="auto")),
                lambda: q.evaluate("r001", None, EvalSpec(shapes="paper", device="auto"))):
        with pytest.raises(EvalPending):
            ask()
    assert main(["evaluate", str(queue), "--extracted", str(root), "--jobs", "tune", "--device", "cuda"]) == 0
    assert swept == [op] and queue_status(queue) == {"pending": 1, "done": 1}
    said = capsys.readouterr().out
    assert "runA--r000-tune: no sweep baseline (nothing to sweep (scripted))" in said
    assert "evaluated 0, swept 1 original(s); queue: 1 done, 1 pending" in said
    assert (queue / "runA--r000-tune" / TUNE_RESULT_NAME).is_file() and not (queue / "runA--r001" / "result.json").exists()


def test_a_kept_sweep_chunk_timed_on_shapes_the_contract_no_longer_has_is_not_resumed(monkeypatch, tmp_path,
                                                                                    restored_op):
    """The partial's key names the shape set ("paper"), not its dims: after decode attention's contract moved its
    timed contexts to S+9 (2026-12-06) a resumed sweep would have mixed configs timed at S=1024 into a baseline
    of S=1033. The configs below are SYNTHETIC."""
    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.contract.op import load_manifest
    from astra_sglang.contract.result import SweepConfig, SweepShape
    from astra_sglang.harness.parent import tune_baseline
    from astra_sglang.harness.shared.suite import timed_shapes

    op = restored_op("decode_attention")
    config = EvalConfig(shapes="test", device="cpu", timing=True)
    now = timed_shapes(load_manifest(op), config)
    lines: list[str] = []

    def kept(dims: list[dict[str, int]]) -> tuple[Path, str]:
        shape = [SweepShape(dims=d, dtype="float16", original_us=10.0, candidate_us=9.0, speedup=1.11, spread_pct=1.0)
                 for d in dims]
        part = tune_baseline.TunePartial(key="k", seed=1, done={0: SweepConfig(config={}, ok=True, shapes=shape)})
        path = tmp_path / "p.json"
        path.write_text(part.model_dump_json())
        return path, "k"

    assert tune_baseline._read_partial(*kept(now), lines.append, now) is not None
    moved = [{**d, "S": d["S"] + 9} for d in now]
    assert tune_baseline._read_partial(*kept(moved), lines.append, now) is None
    assert any("other shapes" in x for x in lines)
