"""Adversarial candidates against the harness on CPU (merge_state under TRITON_INTERPRET=1): each attack class
gets the verdict its defence gives, and proves through a marker file that the attack really ran.

The files are under tests/candidates/<op>/cheats/ and say in their header what they do and what must catch them.
The static screen (harness/screen.py) rejects every one of these before it runs; it is switched off here
(``screen=False``) so that each test exercises the defence behind it on its own (separation of checker and
candidate, the op contract's return values, the timing tripwire, the checker's wall clock). The last test shows
the screen catching them all with a named rule.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from h_fixtures.ops import make_h_merge

from astra_sglang.contract.eval_config import EvalConfig
from astra_sglang.contract.op import load_manifest
from astra_sglang.harness import evaluate, evaluate_many
from astra_sglang.harness.shared.sandbox import WRITABLE_ENV

REPO = Path(__file__).resolve().parent.parent
CHEATS = REPO / "tests" / "candidates" / "merge_state" / "cheats"
MS = REPO / "tests" / "candidates" / "merge_state"
CPU = EvalConfig(shapes="test", dtypes=["bfloat16"], device="cpu", timeout_s=60, seed=4321, screen=False)
SIM = CPU.model_copy(update=dict(simulate_timing=True, warmup=1, rep=4, max_graph_launches=3,
                                 distributions=["normal"]))


@pytest.fixture(scope="module")
def merge_op(tmp_path_factory, restored_op_or_none) -> Path:
    real = restored_op_or_none("merge_state")
    return real if real is not None else make_h_merge(tmp_path_factory.mktemp("ops"))


@pytest.fixture(scope="module")
def marker(tmp_path_factory):
    d = tmp_path_factory.mktemp("cheat_markers")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASTRA_TEST_CHEAT_MARKER", str(d))  # inherited by the checker and the candidate's worker
        mp.setenv(WRITABLE_ENV, str(d))  # which may write there, and nowhere else outside its sandbox
        yield d


NAMES = ["rebinds_checker", "rebinds_original", "wrong_return", "scales_timer"]


@pytest.fixture(scope="module")
def verdicts(merge_op, marker):
    return dict(zip(NAMES, evaluate_many(merge_op, [CHEATS / f"{n}.py" for n in NAMES], CPU)))


def _ran(marker: Path, name: str) -> str:
    text = (marker / name).read_text()
    assert str(os.getpid()) not in text.split()  # it ran in the candidate's worker, not here
    return text


def test_a_candidate_rebinding_the_checker_at_import_is_still_checked(verdicts, marker):
    r = verdicts["rebinds_checker"]
    assert not r.ok and r.correctness.first_failure.reason == "mismatch", r.model_dump_json(indent=1)
    assert "Worker._check" in _ran(marker, "rebinds_checker")  # it ran, and patched what it found


def test_a_candidate_making_itself_the_original_and_reference_is_still_checked(verdicts, marker):
    r = verdicts["rebinds_original"]
    assert not r.ok and r.correctness.first_failure.reason == "mismatch", r.model_dump_json(indent=1)
    assert "make_launcher" in _ran(marker, "rebinds_original")


def test_right_buffers_with_a_wrong_return_value_fail_with_that_reason(verdicts, marker):
    f = verdicts["wrong_return"].correctness.first_failure
    assert f.reason == "wrong return value" and "prefix_lse" in f.detail and "output_lse" in f.detail, f
    assert "returned prefix_lse" in _ran(marker, "wrong_return")


def test_a_candidate_rescaling_the_clock_is_rejected_by_the_tripwire(verdicts, marker):
    r = verdicts["scales_timer"]
    f = r.correctness.first_failure
    assert not r.ok and f.reason == "clock tampered" and "time.perf_counter" in f.detail, r.model_dump_json(indent=1)
    assert "perf_counter" in _ran(marker, "scales_timer")


def test_times_forged_inside_the_worker_are_suspect_never_a_win(merge_op, marker):
    """The tripwire is disarmed by the candidate itself; the checker's wall clock still sees the truth."""
    r = evaluate(merge_op, CHEATS / "forges_times.py", SIM)
    assert r.correctness.ok and r.timing is not None, r.model_dump_json(indent=1)
    assert all(s.verdict == "suspect" for s in r.timing.shapes), r.timing
    assert r.timing.geomean_speedup <= 1.0
    assert r.timing.suspect and all("wall clock" in s for s in r.timing.suspect)
    assert "timing.tampered" in _ran(marker, "forges_times")


def test_a_kernel_that_skips_work_in_timed_replays_is_caught_on_a_timed_replay(merge_op, marker):
    """Issue 22 class 1: work done for the first set of a back-to-back burst only. The re-check after timing
    uses that first set, so before every timed replay was checked this passed as correct (and on the H200,
    with hundreds of timing sets at small shapes, as a large false win)."""
    r = evaluate(merge_op, CHEATS / "skips_work_in_timed_replays.py", SIM)
    f = r.correctness.first_failure
    assert not r.ok and f is not None and f.reason == "timed run wrong", r.model_dump_json(indent=1)[:3000]
    assert "timed replay" in f.detail and "timing set 1 of" not in f.detail and "never written" in f.detail, f.detail
    assert "skipped" in _ran(marker, "skips_work_in_timed_replays")


GOOD = [None, MS / "hand_written.py", MS / "h_correct.py", MS / "scripted" / "r3.py", MS / "scripted" / "r4.py",
        MS / "scripted" / "r5.py"]


def test_no_false_rejection_original_and_every_correct_candidate_pass(merge_op):
    for path, r in zip(GOOD, evaluate_many(merge_op, GOOD, CPU)):
        assert r.ok, f"{path}: {r.model_dump_json(indent=1)[:3000]}"


TRITON_OPS = ["cast_to_float32_logits", "softcap_inplace_logits", "softcap_to_float32_logits", "merge_state"]


@pytest.mark.parametrize("name", TRITON_OPS)
def test_every_extracted_triton_original_passes_as_a_candidate(name, restored_op):
    op = restored_op(name)
    m = load_manifest(op)
    r = evaluate(op, op / m.recipe.source, CPU.model_copy(update={"dtypes": None}))
    assert r.ok, r.model_dump_json(indent=1)[:3000]


def test_outputs_returned_as_new_tensors_are_checked_like_buffers(tmp_path):
    """An op whose entry allocates its outputs (none passed): the returned tensors are the outputs."""
    from astra_sglang.contract.op import write_manifest

    op = make_h_merge(tmp_path)
    m = load_manifest(op)
    recipe = m.recipe.model_copy(update={"call": ["prefix_output", "prefix_lse", "suffix_output", "suffix_lse"]})
    write_manifest(op, m.model_copy(update={"recipe": recipe}))
    good, wrong = evaluate_many(op, [MS / "h_correct.py", CHEATS / "wrong_return.py"], CPU)
    assert good.ok and good.correctness.cases_run >= 10, good.model_dump_json(indent=1)
    f = wrong.correctness.first_failure
    assert f.reason == "wrong return value" and "new tensor" in f.detail, f


# Wrong kernels, not attacks on the harness: they pass the screen by design and are caught by the suite's reach
# (off-list held-out dims, special values at large sizes: tests/test_integrity2_suite_reach.py; a call form of
# SGLang's call sites: tests/test_i22_forms.py)
PASS_THE_SCREEN = {"wrong_off_list_head_dim.py", "wrong_special_when_large.py", "wrong_when_outputs_omitted.py"}


def test_the_static_screen_rejects_every_cheat_before_it_runs(merge_op, tmp_path, monkeypatch):
    """Defence in depth: with the screen on (the default), none of the cheats that attack the harness gets as far
    as a worker."""
    monkeypatch.setenv("ASTRA_TEST_CHEAT_MARKER", str(tmp_path))
    paths = sorted(p for p in CHEATS.glob("*.py") if p.name not in PASS_THE_SCREEN)
    assert PASS_THE_SCREEN <= {p.name for p in CHEATS.glob("*.py")}
    on = CPU.model_copy(update={"screen": True})
    for path, r in zip(paths, evaluate_many(merge_op, paths, on), strict=True):
        assert not r.build.ok and r.error and "screen: " in r.error, (path.name, r.error)
    assert not list(tmp_path.iterdir()), "a screened cheat ran anyway"


def test_a_tunable_cheat_may_be_chosen_by_the_sweep_but_its_frozen_source_fails_the_full_evaluation(
        merge_op, marker, tmp_path):
    """A sweep skips the defences that only guard a claim (JudgeSession.screening: the kept-replay check, the
    after-timing re-checks, the NVML wait): on the H200 they were most of a decode_attention sweep's minutes. The
    sweep's choice is never the verdict: the frozen source gets every defence, so the cheat still fails."""
    cand = tmp_path / "tunable_skips_work.py"
    cand.write_text((CHEATS / "skips_work_in_timed_replays.py").read_text()
                    + '\nTUNE = {"UNUSED": [1, 2]}\nCONFIG = {"UNUSED": 1}\n')
    r = evaluate(merge_op, cand, SIM)
    assert r.sweep is not None and any(c.ok and c.shapes for c in r.sweep.configs), r.sweep
    f = r.correctness.first_failure
    assert not r.ok and f is not None and f.reason == "timed run wrong", r.model_dump_json(indent=1)[:3000]
    assert "skipped" in _ran(marker, "skips_work_in_timed_replays")


def test_a_kernel_that_memoises_by_input_fingerprint_is_caught_on_a_perturbed_replay(merge_op, marker):
    """Issue 22 class 2: every timed replay saw the same inputs, so outputs kept by a fingerprint of a few input
    elements were right on every replay the judge checked, and the work was skipped while timed. The kept
    replay's inputs are now perturbed where no sparse fingerprint looks: the memo's outputs are the old ones.

    The window is drawn anew each batch, so one batch catches it only with a probability: at these tiny shapes (a
    1-element window in 9..125 elements, the cheat looking at 2 of them) about 0.5-0.8 per batch of the 5- and
    3-wide shapes (the 1-wide shape has nothing to perturb). Four batches per shape leave a miss of about 1e-4;
    at serving sizes one window in a million elements is missed by any sparse fingerprint almost surely."""
    cfg = SIM.model_copy(update=dict(rep=100))  # four batches of 25 per timed shape
    r = evaluate(merge_op, CHEATS / "memoises_by_fingerprint.py", cfg)
    f = r.correctness.first_failure
    assert not r.ok and f is not None and f.reason == "timed run wrong", r.model_dump_json(indent=1)[:3000]
    assert "timed replay" in f.detail, f.detail
    assert "memo hit" in _ran(marker, "memoises_by_fingerprint")


@pytest.mark.parametrize("path", [MS / "h_correct.py", MS / "scripted" / "r4.py"])
def test_a_correct_kernel_passes_the_perturbed_replay_checks(merge_op, path):
    """No false reject: the judge checks the kept replay on the same perturbed values the worker ran."""
    r = evaluate(merge_op, path, SIM)
    assert r.ok and r.timing is not None, r.model_dump_json(indent=1)[:3000]
