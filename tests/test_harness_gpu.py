"""Harness checks that need the GPU (run on the H200; skipped elsewhere). The full acceptance run with tables is
scripts/gpu_harness_check.py."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from astra_sglang.contract.eval_config import EvalConfig  # noqa: E402
from astra_sglang.contract.op import load_manifest  # noqa: E402
from astra_sglang.harness.evaluate import evaluate, evaluate_many  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CANDS = REPO / "tests" / "candidates"


def _op(name: str) -> Path:
    op = REPO / "extracted" / name
    if not (op / "manifest.json").is_file():
        pytest.skip(f"extracted/{name} missing")
    return op


@pytest.mark.parametrize("name", ["silu_and_mul", "fused_add_rmsnorm", "merge_state"])
def test_original_against_itself_is_no_change_on_paper_shapes(name):
    op = _op(name)
    m = load_manifest(op)
    src = op / (m.recipe.sources[0] if m.recipe.kind == "cuda_jit" else m.recipe.source)
    r = evaluate(op, src, EvalConfig(shapes="paper", timing_dtypes=["bfloat16"]))
    assert r.ok, r.model_dump_json(indent=1)
    assert r.timing and r.timing.shapes and r.timing.copy_ceiling_gbps > 1000
    for s in r.timing.shapes:
        assert s.verdict == "no change", s
        assert s.original_pct_ceiling < 105


def test_broken_cuda_candidates_are_rejected():
    op = _op("fused_add_rmsnorm")
    broken = sorted((CANDS / "fused_add_rmsnorm" / "broken").glob("*.cuh"))
    if not broken:
        pytest.skip("no broken CUDA candidates")
    for path, r in zip(broken, evaluate_many(op, broken, EvalConfig(shapes="paper", timing_dtypes=["bfloat16"]))):
        assert not r.ok, f"{path.name} was accepted: {r.model_dump_json(indent=1)[:3000]}"
