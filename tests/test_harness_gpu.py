"""The harness's integrity defences on the GPU (run on the H200; skipped without CUDA by conftest's gpu marker).

The original-vs-itself and broken-candidate acceptance checks live in tests/test_acceptance_gpu.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_sglang.contract.eval_config import EvalConfig
from astra_sglang.harness import evaluate, evaluate_many
from astra_sglang.harness.shared.sandbox import WRITABLE_ENV

pytestmark = [pytest.mark.gpu, pytest.mark.gpu_timing]  # timed: never beside other GPU work

REPO = Path(__file__).resolve().parent.parent
CANDS = REPO / "tests" / "candidates"


CHEATS = CANDS / "merge_state" / "cheats"
PAPER = EvalConfig(shapes="paper", timing_dtypes=["bfloat16"])
UNSCREENED = PAPER.model_copy(update={"screen": False})  # the defences behind the screen, on their own


@pytest.fixture()
def marker(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_TEST_CHEAT_MARKER", str(tmp_path))  # inherited by the checker and the worker
    monkeypatch.setenv(WRITABLE_ENV, str(tmp_path))  # which may write there, and nowhere else outside its sandbox
    return tmp_path


def test_python_cheats_on_paper_shapes(marker, restored_op):
    op = restored_op("merge_state")
    names = ["rebinds_checker", "rebinds_original", "wrong_return", "scales_timer", "forges_times"]
    r = dict(zip(names, evaluate_many(op, [CHEATS / f"{n}.py" for n in names], UNSCREENED)))
    for n in names:
        assert r[n].correctness is not None, (n, r[n].error, r[n].build.log[-2000:])
    assert r["rebinds_checker"].correctness.first_failure.reason == "mismatch"
    assert r["rebinds_original"].correctness.first_failure.reason == "mismatch"
    assert r["wrong_return"].correctness.first_failure.reason == "wrong return value"
    f = r["scales_timer"].correctness.first_failure
    assert f.reason == "clock tampered" and "elapsed_time" in f.detail, f
    forged = r["forges_times"]
    assert forged.correctness.ok and forged.timing is not None, forged.model_dump_json(indent=1)
    assert all(s.verdict == "suspect" for s in forged.timing.shapes), forged.timing
    assert forged.timing.geomean_speedup <= 1.0 and all("wall clock" in s for s in forged.timing.suspect)
    for n in names:
        assert (marker / n).is_file(), f"{n}: the attack did not run"


def test_a_kernel_that_skips_work_in_timed_replays_is_caught_on_the_gpu(marker, restored_op):
    """Issue 22 class 1 on the H200: the capture sees the burst, so the graph holds the first set's launch only
    (a large false win at small shapes before every timed replay was checked)."""
    r = evaluate(restored_op("merge_state"), CHEATS / "skips_work_in_timed_replays.py", UNSCREENED)
    f = r.correctness.first_failure if r.correctness else None
    assert not r.ok and f is not None and f.reason == "timed run wrong", r.model_dump_json(indent=1)[:3000]
    assert "skipped" in (marker / "skips_work_in_timed_replays").read_text()


def test_cuda_static_constructor_calling_python_is_still_checked(marker, restored_op):
    op = restored_op("fused_add_rmsnorm")
    r = evaluate(op, CANDS / "fused_add_rmsnorm" / "cheats" / "static_ctor_python.cuh", UNSCREENED)
    assert not r.ok and r.correctness.first_failure.reason == "mismatch", r.model_dump_json(indent=1)[:3000]
    assert "rebound" in (marker / "static_ctor_python").read_text()  # the constructor ran, in the worker


GOOD = {"merge_state": ["merge_state/hand_written.py", "merge_state/h_correct.py", "merge_state/scripted/r3.py",
                        "merge_state/scripted/r4.py", "merge_state/scripted/r5.py"],
        "fused_add_rmsnorm": ["fused_add_rmsnorm/hand_written.cuh", "fused_add_rmsnorm/scripted/r3.cuh",
                              "fused_add_rmsnorm/scripted/r4.cuh", "fused_add_rmsnorm/scripted/r5.cuh"],
        "silu_and_mul": ["silu_and_mul/hand_written.cuh", "silu_and_mul/scripted/r3.cuh",
                         "silu_and_mul/scripted/r4.cuh", "silu_and_mul/scripted/r5.cuh"]}


@pytest.mark.parametrize("name", list(GOOD))
def test_no_false_rejection_of_correct_candidates_with_heldout_cases(name, restored_op):
    op = restored_op(name)
    paths = [CANDS / p for p in GOOD[name]]
    cfg = PAPER.model_copy(update={"include_heldout": True})
    for path, r in zip(paths, evaluate_many(op, paths, cfg)):
        assert r.ok, f"{path.name}: {r.model_dump_json(indent=1)[:3000]}"


@pytest.mark.parametrize("name,cand", [("merge_state", "merge_state/hand_written.py"),
                                       ("fused_add_rmsnorm", "fused_add_rmsnorm/hand_written.cuh")])
def test_one_candidate_evaluates_on_paper_shapes_within_30_s(name, cand, restored_op, measurements):
    """Checker and candidate in separate processes must stay fast: the full evaluation (build cached)."""
    import time

    op = restored_op(name)
    evaluate(op, CANDS / cand, EvalConfig(shapes="test", timing=False))  # build (and cache) outside the clock
    t0 = time.monotonic()
    r = evaluate(op, CANDS / cand, PAPER)
    wall = time.monotonic() - t0
    assert r.ok, r.model_dump_json(indent=1)[:3000]
    measurements(f"harness_eval_wall_{name}", {"op": name, "candidate": cand, "shapes": "paper", "wall_s": round(wall, 2),
                               "cases_run": r.correctness.cases_run, "device": r.device,
                               "geomean_speedup": r.timing.geomean_speedup if r.timing else None})
    assert wall <= 30.0, f"{name}: {wall:.1f} s"


def test_an_op_with_index_inputs_is_timed_with_its_kept_replays_checked(restored_op):
    """Decode attention (int kv_indptr / kv_indices / num_kv_splits, which no replay guard holds) against a copy of
    itself, every timed batch with a kept (and perturbed) replay. Before the judge kept its timing sets alive with
    their graph, the guard's first copy reused the freed kv_indices and the original's replay died on an illegal
    memory access: every round-2 decode-attention candidate on the H200, 2026-12-05 (tests/test_timed_sets_alive.py
    is the CPU half)."""
    op = restored_op("decode_attention")
    src = op / "src" / "kernels" / "ops" / "attention" / "decode_attention.py"
    cfg = UNSCREENED.model_copy(update={"max_timed_shapes": 2, "check_all_shapes": False})
    r = evaluate(op, src, cfg)
    assert r.ok, r.model_dump_json(indent=1)[:3000]
    assert r.timing is not None and len(r.timing.shapes) == 2, r.timing
    assert all(s.speedup is not None and 0.8 < s.speedup < 1.25 for s in r.timing.shapes), r.timing
