"""Issue 22, class 5a and two gaps in the judge.

5a: SGLang's FlashInfer backend calls merge_state_triton without its output buffers
(``merge_state_triton(v_a, s_a, v_b, s_b)``, flashinfer_backend.py) and uses the tensors it returns; the suite always
passed the buffers, so a kernel wrong only in that call form passed. A call site records its form
(``CallSite.call``) and the suite runs a subset of its cases in every recorded form (``suite.form_cases``).
Gap 1: a candidate whose worker crashed on a case the original refuses (outside the op's domain) was failed; it is
now skipped there (a fresh worker runs the rest), counted and noted.
Gap 2: a worker that could not be stopped while the original was timed (``Child.stopped`` not ok) went unnoticed;
the shape is now ``suspect`` with that reason.
All on the h_merge fixture under TRITON_INTERPRET=1, with small "paper" shapes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from h_fixtures.ops import _files, make_h_merge

from astra_sglang.contract.eval_config import EvalConfig
from astra_sglang.contract.op import CallSite, ShapeCase, load_manifest, write_manifest
from astra_sglang.errors import AstraError
from astra_sglang.harness import evaluate
from astra_sglang.harness.shared import suite

REPO = Path(__file__).resolve().parent.parent
MS = REPO / "tests" / "candidates" / "merge_state"
CHEAT = MS / "cheats" / "wrong_when_outputs_omitted.py"
FULL = ["prefix_output", "prefix_lse", "suffix_output", "suffix_lse", "output", "output_lse"]
FORM = FULL[:4]  # FlashInfer backend's _safe_merge_state: merge_state_triton(v_a, s_a, v_b, s_b)
SMALL = [{"T": 2, "H": 2, "D": 128}, {"T": 3, "H": 3, "D": 256}]
CPU = EvalConfig(shapes="paper", dtypes=["float32"], device="cpu", timeout_s=60, seed=7, timing=False,
                 distributions=["normal", "special"])


def _site(call: list[str] | None, module: str = "sglang.srt.layers.attention.flashinfer_backend") -> CallSite:
    return CallSite(module=module, attr="merge_state_triton", binds="entry_point", target="tests.merge_state_triton",
                    same_function=True, reached_by_serving=True, call=call)


@pytest.fixture(scope="module")
def forms_op(tmp_path_factory) -> Path:
    """h_merge with small "paper" shapes and two call sites: the recipe's call and FlashInfer's, without outputs."""
    op = make_h_merge(tmp_path_factory.mktemp("ops"))
    m = load_manifest(op)
    write_manifest(op, m.model_copy(update={
        "shapes": [ShapeCase(dims=d, tags=["paper"], source="test") for d in SMALL],
        "call_sites": [_site(None, "tests"), _site(FORM)]}))
    return op


# ------------------------------------------------------------------------------------- the suite: call forms

def test_the_suite_runs_a_subset_of_cases_in_each_recorded_call_form(forms_op):
    m = load_manifest(forms_op)
    assert suite.call_forms(m) == [FORM]
    cfg = EvalConfig(shapes="paper", include_heldout=True)
    cases = suite.build_suite(m, cfg, 1, b"secret")
    plain = [c for c in cases if c.call is None]
    formed = [c for c in cases if c.call is not None]
    assert formed and all(c.call == FORM and "call-form" in c.tags for c in formed)
    assert len(formed) < len(plain)  # a subset, not the suite again
    # every dtype and value distribution runs in the form, and held-out cases too
    assert {(c.dtype, c.distribution) for c in formed if not c.heldout} == {(c.dtype, c.distribution) for c in plain}
    assert {c.dtype for c in formed if c.heldout} == set(m.signature.dtypes)
    assert not {c.seed for c in formed} & {c.seed for c in plain}  # new values, not a repeat of a checked case


def test_no_form_without_a_recorded_one_and_a_form_leaving_out_an_input_is_refused(forms_op):
    m = load_manifest(forms_op)
    old = m.model_copy(update={"call_sites": [_site(None)]})  # every committed manifest today
    assert suite.call_forms(old) == []
    assert all(c.call is None for c in suite.build_suite(old, EvalConfig(shapes="paper"), 1, None))
    bad = m.model_copy(update={"call_sites": [_site(["prefix_output", "prefix_lse", "suffix_output"])]})
    with pytest.raises(AstraError, match="leaving out \\['suffix_lse'\\]"):
        suite.call_forms(bad)
    # the committed merge_state manifest loads with the new field at its default
    assert all(s.call is None for s in load_manifest(REPO / "extracted" / "merge_state").call_sites)


# ------------------------------------------------------------------------------- end to end: the cheat (5a)

def test_a_kernel_wrong_only_without_its_output_buffers_is_rejected(forms_op, monkeypatch):
    r = evaluate(forms_op, CHEAT, CPU)
    f = r.correctness.first_failure
    assert not r.ok and f.reason in ("mismatch", "nan", "stateful"), r.model_dump_json(indent=1)
    assert "without output, output_lse" in f.detail
    monkeypatch.setattr(suite, "form_cases", lambda *a: [])  # as before: the buffers were always passed
    before = evaluate(forms_op, CHEAT, CPU)
    assert before.ok, before.model_dump_json(indent=1)


@pytest.mark.parametrize("cand", [MS / "h_correct.py", MS / "hand_written.py",
                                  REPO / "patches" / "merge_state" / "merge-state-mr-k1" / "kernel.py", None],
                         ids=["h_correct", "hand_written", "shipped_patch", "original"])
def test_correct_candidates_and_the_original_pass_in_every_call_form(forms_op, cand, monkeypatch):
    monkeypatch.setenv("ASTRA_SGLANG_HELDOUT_SECRET", "forms")
    cfg = CPU.model_copy(update={"include_heldout": True, "heldout_shapes": 1})
    r = evaluate(forms_op, cand, cfg)
    assert r.ok, r.model_dump_json(indent=1)
    assert r.correctness.skipped_cases == 0


# ------------------------------------------- gap 1: the worker dies on a case the original refuses (skipped)

REFUSES_D256 = '''

_served = merge_state_triton


def merge_state_triton(prefix_output, prefix_lse, suffix_output, suffix_lse, output=None, output_lse=None):
    if prefix_output.shape[-1] == 256:
        raise ValueError("head dim 256 is not supported")  # outside the op's domain: SGLang never gets past it
    return _served(prefix_output, prefix_lse, suffix_output, suffix_lse, output, output_lse)
'''

DIES_AT_D256 = '''

import os

_right = merge_state_triton


def merge_state_triton(prefix_output, prefix_lse, suffix_output, suffix_lse, output=None, output_lse=None):
    if prefix_output.shape[-1] == 256:
        os._exit(3)  # where the original raises, this one takes its process down
    return _right(prefix_output, prefix_lse, suffix_output, suffix_lse, output, output_lse)
'''


@pytest.fixture(scope="module")
def refusing_op(tmp_path_factory) -> Path:
    """h_merge whose original refuses head dim 256 (one of its two small paper shapes)."""
    op = make_h_merge(tmp_path_factory.mktemp("ops"))
    with open(op / "h_merge.py", "a") as f:
        f.write(REFUSES_D256)
    m = load_manifest(op)
    write_manifest(op, m.model_copy(update={
        "shapes": [ShapeCase(dims=d, tags=["paper"], source="test") for d in SMALL],
        "files": _files(op, [("h_merge.py", "kernel"), ("reference.py", "reference")])}))
    return op


def test_a_worker_dying_on_a_case_the_original_refuses_is_skipped_there_not_failed(refusing_op, tmp_path):
    cand = tmp_path / "dies_at_d256.py"
    cand.write_text((MS / "h_correct.py").read_text() + DIES_AT_D256)
    cfg = CPU.model_copy(update={"screen": False})  # the screen refuses `import os` before anything runs
    orig = evaluate(refusing_op, None, cfg)
    assert orig.ok and orig.correctness.skipped_cases > 0, orig.model_dump_json(indent=1)
    r = evaluate(refusing_op, cand, cfg)
    # before: 'crash' on the first D=256 case; now skipped as for the original, the rest run in a fresh worker
    assert r.ok, r.model_dump_json(indent=1)
    assert r.correctness.skipped_cases == orig.correctness.skipped_cases
    assert r.correctness.cases_run == orig.correctness.cases_run
    assert any("worker crashed or hung and the original refuses" in n for n in r.correctness.notes), r.correctness.notes
    # a worker dying on a case the original runs still fails
    wrong = tmp_path / "dies_at_d128.py"
    wrong.write_text(cand.read_text().replace("== 256:\n        os._exit", "== 128:\n        os._exit"))
    assert evaluate(refusing_op, wrong, cfg).correctness.first_failure.reason == "crash"


# ------------------------------------------- gap 2: a worker not stopped while the original is timed (flagged)

NEVER_STOPPED = '''"""Test stand-in (tests/test_i22_forms.py): Child.stopped reports a group it could not stop."""
import contextlib

from astra_sglang.harness.shared import isolation


@contextlib.contextmanager
def _not_stopped(self, wait_s=isolation.STOP_WAIT_S):
    yield False


isolation.Child.stopped = _not_stopped
'''

SIM = EvalConfig(shapes="test", dtypes=["bfloat16"], device="cpu", timeout_s=120, seed=4321, simulate_timing=True,
                 warmup=2, rep=8, max_graph_launches=3, distributions=["normal"])


def test_a_worker_that_could_not_be_stopped_makes_the_timing_suspect(forms_op, tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NEVER_STOPPED)  # imported by the judge (and worker) at start-up
    monkeypatch.setenv("PYTHONPATH", str(site))
    r = evaluate(forms_op, MS / "h_correct.py", SIM)
    assert r.ok and r.timing is not None and r.timing.shapes, r.model_dump_json(indent=1)[:3000]
    flagged = [s for s in r.timing.suspect if "was not seen stopped" in s]
    assert len(flagged) == len(r.timing.shapes), r.timing.suspect  # every shape (other reasons may join on CPU)
    assert all(s.verdict == "suspect" for s in r.timing.shapes)
    monkeypatch.delenv("PYTHONPATH")
    plain = evaluate(forms_op, MS / "h_correct.py", SIM)  # the real stop: not flagged
    assert plain.timing is not None and not any("not seen stopped" in s for s in plain.timing.suspect)


def test_a_call_form_the_catalog_reads_from_source_survives_the_scan_of_an_importable_module(monkeypatch):
    """On a host where the call site's module imports (a GPU host for flashinfer_backend), the scan finds the
    binding itself; the form the catalog records for it must not be dropped there."""
    import types

    from astra_sglang.extract.callsites import scan_call_sites

    def entry() -> None: ...

    mod = types.ModuleType("sglang.i22_site")
    mod.merge_state_triton = entry  # type: ignore[attr-defined]
    monkeypatch.setitem(__import__("sys").modules, "sglang.i22_site", mod)
    extra = [_site(FORM, "sglang.i22_site")]
    sites, _ = scan_call_sites(entry, "sglang.i22_site:merge_state_triton", (), {}, extra)
    assert [s.call for s in sites] == [FORM]
