"""Issue 22, attack class 5: a kernel wrong only where the suite never looks.

(b) A dim with few values in the manifest (head dim 128/256) was drawn only from that list: a kernel right only
there passed. Held-out cases now also draw legal values off the list (``suite._off_list``).
(c) Special values (inf, NaN, ...) ran only on shapes up to ``dist_max_elems`` (2^22) and the smallest: a kernel
whose large-size path mishandles them passed. One special case per dtype now runs on the largest checked shape
above it (``suite._large_special_shape``).

The suites are built from the real manifests under extracted/ (only the committed manifest.json is read); the
two adversarial candidates (tests/candidates/merge_state/cheats/, ours) run end to end on the h_merge fixture
under TRITON_INTERPRET=1, with its shapes made small so that "paper" suites run on CPU.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from h_fixtures.ops import make_h_merge

from astra_sglang.contract.base import fit_dim
from astra_sglang.contract.eval_config import EvalConfig
from astra_sglang.contract.op import Manifest, ShapeCase, load_manifest, write_manifest
from astra_sglang.harness import evaluate
from astra_sglang.harness.shared import suite
from astra_sglang.harness.shared.suite import build_suite, heldout_cases, largest_numel

REPO = Path(__file__).resolve().parent.parent
EXTRACTED = REPO / "extracted"
CHEATS = REPO / "tests" / "candidates" / "merge_state" / "cheats"
SECRETS = [f"reach{i}".encode() for i in range(12)]


def _manifest(op: str) -> Manifest:
    return load_manifest(EXTRACTED / op)


def _listed(m: Manifest, name: str) -> set[int]:
    return {s.dims[name] for s in m.shapes}


def _legal(m: Manifest, name: str, v: int) -> bool:
    d = next(d for d in m.signature.dims if d.name == name)
    return fit_dim(v, d.min, d.max, d.multiple_of) == v


def _heldout(m: Manifest, shapes: str) -> list[suite.Case]:
    cfg = EvalConfig(shapes=shapes)  # type: ignore[arg-type]
    dtypes, dists = suite.check_dtypes(m, cfg), suite.distributions(m, cfg)
    return [c for s in SECRETS for c in heldout_cases(m, cfg, s, dtypes, dists)]


# ------------------------------------------------------------------------------ (b) off-list discrete values

@pytest.mark.parametrize(("op", "shapes", "dim", "off"), [
    ("merge_state", "paper", "D", {64, 80, 112, 192}),  # listed: 96, 128, 256 (any multiple of 1)
    ("decode_attention", "decode", "D", {48, 80, 96, 112, 192}),  # listed: 16, 64, 128, 256 (multiples of 16)
])
def test_heldout_head_dims_leave_the_list_within_the_constraints(op, shapes, dim, off):
    m = _manifest(op)
    listed = _listed(m, dim)
    assert 0 < len(listed) <= 4  # a discrete dim: before the fix it was drawn only from this list
    cases = _heldout(m, shapes)
    drawn = {c.dims[dim] for c in cases}
    assert drawn - listed, f"only listed head dims drawn: {sorted(drawn)}"
    assert drawn & listed  # a mix: listed values are still drawn too
    assert all(_legal(m, dim, v) for v in drawn), sorted(drawn)
    assert off <= set(suite._off_list(m, dim, sorted(listed)))  # the common model head dims the dim allows
    # the first held-out shape of every secret leaves the list (the rest mix): the defence is never left to luck
    for s in SECRETS:
        cfg = EvalConfig(shapes=shapes)  # type: ignore[arg-type]
        first = heldout_cases(m, cfg, s, suite.check_dtypes(m, cfg), suite.distributions(m, cfg))[0]
        assert first.dims[dim] not in listed
    assert all(largest_numel(m, c.dims) <= EvalConfig().check_max_elems for c in cases)


def test_pinned_dims_stay_pinned_and_free_dims_keep_their_constraints():
    da = _manifest("decode_attention")
    assert {c.dims["MS"] for c in _heldout(da, "decode")} == {8}  # min = max = 8: no legal value off the list
    far = _manifest("fused_add_rmsnorm")  # no discrete dim: H (7 values) is drawn freely, on multiples of 8
    hs = {c.dims["H"] for c in _heldout(far, "paper")}
    assert len(hs) > 4 and all(h % 8 == 0 for h in hs)


# ---------------------------------------------------------------------- (c) special values on a large shape

def test_special_values_also_run_on_the_largest_checked_shape_above_dist_max_elems():
    m = _manifest("merge_state")
    cfg = EvalConfig(shapes="paper")
    cases = build_suite(m, cfg, 1, None)
    big = [c for c in cases if c.distribution == "special"
           and largest_numel(m, c.dims) > cfg.dist_max_elems]
    assert sorted(c.dtype for c in big) == sorted(m.signature.dtypes)  # one per dtype, no more
    checked = [largest_numel(m, c.dims) for c in cases if c.distribution == "normal"]
    assert {largest_numel(m, c.dims) for c in big} == {max(n for n in checked if n <= cfg.check_max_elems)}
    # held-out special cases are not held to dist_max_elems either
    held = [c for c in _heldout(m, "paper") if c.distribution == "special"]
    assert any(largest_numel(m, c.dims) > cfg.dist_max_elems for c in held)


def test_no_large_special_case_where_the_op_has_no_special_values_or_runs_the_cpu_suite():
    for op, shapes in (("decode_attention", "decode"), ("fused_add_rmsnorm", "paper")):
        assert all(c.distribution != "special" for c in build_suite(_manifest(op), EvalConfig(shapes=shapes), 1, None))
    test = build_suite(_manifest("merge_state"), EvalConfig(shapes="test"), 1, None)
    assert all("large-special" not in c.tags for c in test)


# ----------------------------------------------------------------- the adversarial candidates, end to end

SMALL = [{"T": 2, "H": 2, "D": 128}, {"T": 3, "H": 3, "D": 256}, {"T": 8, "H": 4, "D": 128}]


@pytest.fixture(scope="module")
def small_merge(tmp_path_factory) -> Path:
    """h_merge with tiny "paper" shapes (head dims 128/256 as listed in the fixture): a non-test suite on CPU."""
    op = make_h_merge(tmp_path_factory.mktemp("ops"))
    m = load_manifest(op)
    write_manifest(op, m.model_copy(update={"shapes": [ShapeCase(dims=d, tags=["paper"], source="test")
                                                       for d in SMALL]}))
    return op


CPU = EvalConfig(shapes="paper", dtypes=["float32"], device="cpu", timeout_s=60, seed=7, timing=False)


def test_a_kernel_right_only_at_listed_head_dims_is_rejected_on_a_heldout_case(small_merge, monkeypatch):
    monkeypatch.setenv("ASTRA_SGLANG_HELDOUT_SECRET", "suite-reach")
    cfg = CPU.model_copy(update={"include_heldout": True, "heldout_shapes": 2, "distributions": ["normal"]})
    cand = CHEATS / "wrong_off_list_head_dim.py"
    r = evaluate(small_merge, cand, cfg)
    f = r.correctness.first_failure
    assert not r.ok and f.heldout and f.reason == "mismatch", r.model_dump_json(indent=1)
    monkeypatch.setattr(suite, "_off_list", lambda *a: [])  # as before the fix: discrete dims from the list only
    before = evaluate(small_merge, cand, cfg)
    assert before.ok and before.correctness.heldout_cases_run > 0, before.model_dump_json(indent=1)


def test_a_kernel_wrong_on_special_values_only_above_a_size_is_rejected(small_merge, tmp_path, monkeypatch):
    numels = [math.prod(d.values()) for d in SMALL]  # 512, 2304, 4096 elements in the output
    cand = tmp_path / "wrong_special_when_large.py"
    text = (CHEATS / cand.name).read_text()
    assert "LARGE = 1 << 22" in text
    cand.write_text(text.replace("LARGE = 1 << 22", f"LARGE = {numels[1]}"))  # only the largest shape
    cfg = CPU.model_copy(update={"dist_max_elems": numels[1]})  # special values run on 512 and 2304, not 4096
    r = evaluate(small_merge, cand, cfg)
    f = r.correctness.first_failure
    assert not r.ok and f.distribution == "special" and f.dims == SMALL[2], r.model_dump_json(indent=1)
    assert f.reason in ("mismatch", "nan")
    monkeypatch.setattr(suite, "_large_special_shape", lambda *a: None)  # as before the fix
    before = evaluate(small_merge, cand, cfg)
    assert before.ok, before.model_dump_json(indent=1)


def test_a_correct_candidate_and_the_original_still_pass_the_wider_suite(small_merge, monkeypatch):
    monkeypatch.setenv("ASTRA_SGLANG_HELDOUT_SECRET", "suite-reach")
    cfg = CPU.model_copy(update={"include_heldout": True, "heldout_shapes": 2, "dist_max_elems": 2304})
    for cand in (REPO / "tests" / "candidates" / "merge_state" / "h_correct.py", None):
        r = evaluate(small_merge, cand, cfg)
        assert r.ok and r.correctness.heldout_cases_run > 0, r.model_dump_json(indent=1)


def test_the_interpreter_runs_an_agents_wide_batch_case_after_the_cheap_ones() -> None:
    """A check under the Triton interpreter stops at the first case that makes no progress in time (NO VERDICT):
    the K = 4 decode-attention run's Testing agent added B = 512 (few elements, 512 x heads x splits programs),
    and every check of its round 1 stopped there with the cases behind it never run. Cheapest first puts it last."""
    from astra_sglang.contract.eval_config import ExtraCase

    m = _manifest("decode_attention")
    wide = {"B": 512, "S": 3, "NK": 2, "G": 4, "D": 32, "P": 1, "R": 1, "X": 1, "KX": 0, "MS": 8}
    small = {"B": 2, "S": 5, "NK": 1, "G": 1, "D": 16, "P": 1, "R": 2, "X": 1, "KX": 0, "MS": 8}
    cfg = EvalConfig(shapes="test", extra_cases=[ExtraCase(dims=wide, dtype="float16"),
                                                  ExtraCase(dims=small, dtype="float16")])
    cases = build_suite(m, cfg, 7, None)
    assert cases[-1].dims["B"] == 512 and any(c.dims == {**small, "QS": 0} for c in cases)
    cost = [suite.total_numel(m, c.dims) for c in cases]
    assert cost == sorted(cost)
    gpu = build_suite(m, EvalConfig(shapes="paper"), 7, None)  # a GPU suite keeps its order: timed shapes first
    assert [c.dims for c in gpu[:1]] == [suite.timed_shapes(m, EvalConfig(shapes="paper"))[0]]
