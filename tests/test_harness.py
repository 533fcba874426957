"""The harness's verdicts on CPU: SGLang's Triton merge_state under TRITON_INTERPRET=1 against a correct and
many deliberately broken candidates, each in its own worker process; CUDA candidates built with nvcc."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from h_fixtures.ops import make_h_merge

from astra_sglang.contract.eval_config import EvalConfig
from astra_sglang.contract.op import load_manifest
from astra_sglang.errors import AstraError
from astra_sglang.harness import evaluate, evaluate_many
from astra_sglang.harness.parent.evaluate import build_all
from astra_sglang.harness.shared.suite import build_suite

REPO = Path(__file__).resolve().parent.parent
CANDS = REPO / "tests" / "candidates" / "merge_state"
CPU = EvalConfig(shapes="test", dtypes=["bfloat16"], device="cpu", timeout_s=25, seed=1234)


@pytest.fixture(scope="module")
def merge_op(tmp_path_factory, restored_op_or_none) -> Path:
    """SGLang's merge_state as extracted (always under CI); our own fixture with its signature otherwise."""
    return restored_op_or_none("merge_state") or make_h_merge(tmp_path_factory.mktemp("ops"))


# file -> (expected reason or None for a pass); the order puts crashes and hangs before a correct candidate so
# the test also shows that the next candidate is unaffected.
EXPECTED = {
    "h_segfault.py": "crash",
    "h_hangs.py": "timeout",
    "h_correct.py": None,
    "h_exits.py": "build",  # imports os: the static screen rejects it before any worker starts
    "h_wrong_on_one_shape.py": "mismatch",
    "h_partial_write.py": "unwritten output",
    "h_previous_output.py": "stateful",
    "broken/stale_output.py": "stateful",
    "h_mutates_input.py": "input mutated",
    "h_produces_nan.py": "nan",
    "h_syntax_error.py": "build",
    "h_imports_sglang.py": "build",
}


@pytest.fixture(scope="module")
def verdicts(merge_op):
    files = [CANDS / name for name in EXPECTED]
    results = evaluate_many(merge_op, files, CPU)
    return dict(zip(EXPECTED, results, strict=True))


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_candidate_gets_the_right_verdict(verdicts, name):
    r = verdicts[name]
    expected = EXPECTED[name]
    if expected is None:
        assert r.ok, r.model_dump_json(indent=1)
        assert r.correctness.cases_run >= 10 and r.timing is None and r.device.startswith("cpu")
        return
    assert not r.ok
    if expected == "build":
        assert not r.build.ok and r.error.startswith("build failed")
        return
    f = r.correctness.first_failure
    assert f is not None and f.reason == expected, r.model_dump_json(indent=1)
    assert f.seed is not None and f.dtype == "bfloat16" and f.dims


def test_failures_say_where_and_why(verdicts):
    wrong = verdicts["h_wrong_on_one_shape.py"].correctness.first_failure
    heads = [v for k, v in wrong.dims.items() if k not in ("T", "D")]
    assert heads and heads[0] % 5 == 0 and wrong.max_abs_err > 0.1
    mutated = verdicts["h_mutates_input.py"].correctness.first_failure
    assert mutated.tensor == "prefix_lse"
    assert "SIGSEGV" in verdicts["h_segfault.py"].correctness.first_failure.detail
    assert "screen: forbidden-import: line 7 imports os" in verdicts["h_exits.py"].error
    assert "no progress" in verdicts["h_hangs.py"].error
    assert "SyntaxError" in verdicts["h_syntax_error.py"].build.log
    assert "must not import sglang" in verdicts["h_imports_sglang.py"].build.log


def test_original_alone_matches_its_reference(merge_op):
    r = evaluate(merge_op, None, CPU)
    assert r.error is None and r.correctness.ok and r.correctness.cases_run >= 10
    assert r.timing is None


def test_heldout_cases_catch_what_visible_ones_miss_without_revealing_them(merge_op, monkeypatch):
    manifest = load_manifest(merge_op)
    cfg = CPU.model_copy(update={"include_heldout": True})
    secret = next(s for s in (f"s{i}".encode() for i in range(200))
                  if any(c.heldout and c.dims["T"] >= 6 for c in build_suite(manifest, cfg, 1, s)))
    cases = build_suite(manifest, cfg, 1, secret)
    assert all(c.dims["T"] <= 5 for c in cases if not c.heldout)
    assert build_suite(manifest, cfg, 1, secret) == cases  # deterministic for one secret
    assert "heldout" not in (merge_op / "manifest.json").read_text()
    monkeypatch.setenv("ASTRA_SGLANG_HELDOUT_SECRET", secret.decode())
    visible = evaluate(merge_op, CANDS / "h_wrong_on_long_inputs.py", CPU)
    assert visible.ok  # the visible suite cannot see the bug
    final = evaluate(merge_op, CANDS / "h_wrong_on_long_inputs.py", cfg)
    f = final.correctness.first_failure
    assert not final.ok and f.heldout and f.reason == "mismatch"
    assert f.dims == {} and f.seed is None and "T" not in f.detail  # nothing an agent could learn from


def test_cuda_op_on_a_cpu_machine_is_one_clear_error():
    op = REPO / "extracted" / "fused_add_rmsnorm"  # the committed manifest is enough: no build is tried
    with pytest.raises(AstraError, match="needs a GPU"):
        evaluate(op, None, EvalConfig(device="cpu"))


@pytest.mark.nvcc
def test_cuda_candidates_build_in_parallel_with_compiler_message_and_resources(tmp_path, restored_op):
    op = restored_op("fused_add_rmsnorm")
    manifest = load_manifest(op)
    source = op / manifest.recipe.sources[0]
    bad = tmp_path / "bad.cuh"
    bad.write_text(source.read_text() + "\nstatic_assert(h_no_such_constant > 0, \"x\");\n")
    good, broken = build_all(op, manifest, [source, bad], ["bfloat16"], EvalConfig())
    assert good.ok and good.resources and all(k.registers for k in good.resources)
    assert not broken.ok and "h_no_such_constant" in broken.log and "error" in broken.log


def test_bench_cli_json_on_cpu(merge_op):
    cmd = [sys.executable, "-m", "astra_sglang", "bench", str(merge_op), "--candidate", str(CANDS / "h_correct.py"),
           "--device", "cpu", "--shapes", "test", "--dtype", "bfloat16", "--json", "--timeout", "60"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout)
    assert data["correctness"]["ok"] and data["timing"] is None and data["device"].startswith("cpu")


def test_bench_cli_without_gpu_says_so_in_one_line(merge_op):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    out = subprocess.run([sys.executable, "-m", "astra_sglang", "bench", str(merge_op)], capture_output=True,
                         text=True, cwd=REPO, timeout=300)
    assert out.returncode == 2 and "no CUDA GPU visible" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_timing_path_runs_end_to_end_with_simulated_timers(merge_op):
    """The GPU timing code (capture, interleaving, after-timing re-checks, report) exercised on CPU."""
    cfg = CPU.model_copy(update=dict(simulate_timing=True, warmup=1, rep=4, max_graph_launches=3,
                                     distributions=["normal"]))
    r = evaluate(merge_op, CANDS / "h_correct.py", cfg)
    assert r.ok and r.timing is not None and len(r.timing.shapes) == 3
    assert r.timing.geomean_speedup is not None and "interleaved" in r.timing.method
    assert all(s.candidate_us and s.verdict in ("faster", "slower", "no change", "suspect") for s in r.timing.shapes)
