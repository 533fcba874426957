"""What SGLang serves per shape (``Baseline.serves``): which kernel the contract names for which shape and flags,
and the harness checking and timing a candidate against it, including where the extracted original refuses.

The harness tests run on CPU on ``h_norm`` (tests/h_fixtures): fused_add_rmsnorm's signature, an original that
refuses H > 64 as SGLang's JIT kernel refuses H > 8192, and an eager torch baseline served there.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from h_fixtures.ops import H_NORM_MAX_H, make_h_norm

from astra_sglang.contract.eval_config import EvalConfig
from astra_sglang.contract.op import (
    ORIGINAL,
    Baseline,
    DimBound,
    ServeRule,
    load_manifest,
    served_baseline,
    states_serving,
)
from astra_sglang.harness import evaluate

REPO = Path(__file__).resolve().parent.parent
CANDS = REPO / "tests" / "candidates" / "h_norm"
CPU = EvalConfig(shapes="test", dtypes=["bfloat16"], device="cpu", timeout_s=60, seed=2024)
SIM = CPU.model_copy(update=dict(simulate_timing=True, warmup=1, rep=4, max_graph_launches=3,
                                 distributions=["normal"]))
PAPER = [{"T": 256, "H": 4096}, {"T": 128, "H": 11008}, {"T": 1024, "H": 4096}, {"T": 512, "H": 14336}]


# ------------------------------------------------------------------------------ which kernel for which shape


def test_fused_add_rmsnorm_is_served_by_flashinfer_on_every_paper_shape():
    """SGLang 0.5.23 (cast_x_before_out_mul=False) calls sgl_kernel.fused_add_rmsnorm at every hidden size; the
    extracted JIT kernel, which refuses H > 8192, is never what serves this op."""
    m = load_manifest(REPO / "extracted" / "fused_add_rmsnorm")
    assert states_serving(m)
    paper = [s.dims for s in m.shapes if "paper" in s.tags]
    assert sorted(paper, key=lambda d: (d["H"], d["T"])) == sorted(PAPER, key=lambda d: (d["H"], d["T"]))
    for dims in paper + [{"T": 1, "H": 4096}, {"T": 17, "H": 4100}]:
        for dtype in ("bfloat16", "float16"):
            b = served_baseline(m, dims, dtype)
            assert b is not None and b.name == "flashinfer_fused_add_rmsnorm" and b.same_function, (dims, dtype)
    (rule,) = next(b for b in m.baselines if b.name == "flashinfer_fused_add_rmsnorm").serves
    assert rule.source.startswith("sglang/srt/layers/layernorm.py:")


def test_an_op_without_serving_rules_keeps_the_old_behaviour():
    m = load_manifest(REPO / "extracted" / "merge_state")
    assert not states_serving(m) and served_baseline(m, {"T": 512, "NH": 40, "D": 128}, "bfloat16") is None


def _cast_x_dispatch() -> list[Baseline]:
    """RMSNorm.forward_cuda with a residual and cast_x_before_out_mul=True, restated as rules: the JIT kernel
    when H % 16 == 0 and H <= 8192 (is_supported_jit_fused_add_rmsnorm_hidden_size), else forward_native."""
    eager = Baseline(name="forward_native", description="torch eager", when="H > 8192 or H % 16 != 0",
                     same_function=True, returns=["input", "residual"],
                     serves=[ServeRule(dims={"H": DimBound(min=8193)}, scalars={"cast_x_before_out_mul": True}),
                             ServeRule(dims={"H": DimBound(not_multiple_of=16)},
                                       scalars={"cast_x_before_out_mul": True})])
    flashinfer = Baseline(name="flashinfer", description="sgl_kernel", when="cast_x_before_out_mul=False",
                          same_function=True, serves=[ServeRule(scalars={"cast_x_before_out_mul": False})])
    return [eager, flashinfer]


@pytest.mark.parametrize("h,cast,served", [
    (4096, True, ORIGINAL), (8192, True, ORIGINAL), (8200, True, "forward_native"), (4104, True, "forward_native"),
    (11008, True, "forward_native"), (14336, True, "forward_native"),
    (4096, False, "flashinfer"), (11008, False, "flashinfer"), (14336, False, "flashinfer"),
])
def test_rules_pick_the_kernel_sglang_dispatches_to(h, cast, served):
    m = load_manifest(REPO / "extracted" / "fused_add_rmsnorm").model_copy(update={"baselines": _cast_x_dispatch()})
    b = served_baseline(m, {"T": 128, "H": h}, "bfloat16", {"eps": 1e-6, "cast_x_before_out_mul": cast})
    assert (b.name if b is not None else ORIGINAL) == served


def test_dtype_and_missing_scalar_conditions():
    rule = ServeRule(dims={"H": DimBound(max=8192, multiple_of=16)}, dtypes=["bfloat16"], scalars={"flag": True})
    assert rule.holds({"H": 4096}, "bfloat16", {"flag": True})
    assert not rule.holds({"H": 4096}, "float16", {"flag": True})
    assert not rule.holds({"H": 4096}, "bfloat16", {})            # a scalar the call does not have: no match
    assert not rule.holds({"T": 4}, "bfloat16", {"flag": True})   # nor a dim it does not have
    assert ServeRule().holds({"H": 3}, "float16", {})             # an empty rule: always


# ----------------------------------------------------------------------------- the harness against it (CPU)


@pytest.fixture(scope="module")
def norm_op(tmp_path_factory) -> Path:
    return make_h_norm(tmp_path_factory.mktemp("ops"))


def test_a_candidate_wrong_only_where_the_original_refuses_is_caught(norm_op):
    r = evaluate(norm_op, CANDS / "wrong_above_64.py", CPU)
    assert not r.ok
    f = r.correctness.first_failure
    assert f.reason == "mismatch" and f.dims["H"] > H_NORM_MAX_H, r.model_dump_json(indent=1)


def test_a_correct_candidate_is_checked_on_the_shapes_the_original_refuses(norm_op):
    r = evaluate(norm_op, CANDS / "correct.py", CPU)
    assert r.ok, r.model_dump_json(indent=1)
    assert r.correctness.skipped_cases == 0   # before Baseline.serves, every H > 64 case was skipped


def test_a_candidate_refusing_what_the_original_refuses_still_passes(norm_op):
    r = evaluate(norm_op, CANDS / "refuses_above_64.py", CPU)
    assert r.ok, r.model_dump_json(indent=1)
    assert r.correctness.skipped_cases > 0


def test_timing_compares_each_shape_with_what_sglang_serves_there(norm_op):
    r = evaluate(norm_op, CANDS / "correct.py", SIM)
    assert r.ok and r.timing is not None, r.model_dump_json(indent=1)
    rows = {s.dims["H"]: s for s in r.timing.shapes}
    assert set(rows) == {16, 72, 128}             # the shapes the original refuses are timed too
    assert rows[16].served_by == ORIGINAL and not rows[16].original_refused
    assert rows[16].served_us == rows[16].original_us
    for h in (72, 128):
        s = rows[h]
        assert s.original_refused and s.served_by == "h_norm_eager" and s.baseline_name == "h_norm_eager"
        assert s.served_us == s.original_us and s.served_speedup == pytest.approx(s.speedup)
    assert all(s.served_speedup for s in r.timing.shapes)
    # a suspect shape (host timers on CPU can be) counts at most 1.0, as in every geomean
    served = [min(s.served_speedup, 1.0) if s.verdict == "suspect" else s.served_speedup for s in r.timing.shapes]
    assert r.timing.geomean_speedup == pytest.approx(math.exp(sum(math.log(v) for v in served) / len(served)))
    small = rows[16]
    assert r.timing.geomean_vs_original == pytest.approx(min(small.speedup, 1.0) if small.verdict == "suspect"
                                                         else small.speedup)
