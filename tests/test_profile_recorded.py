"""``profile``'s attribution on a trace RECORDED on the H200 (2026-12-03, docs/measurements/2026-12-03/README.md):
SGLang 0.5.23's own forward (``sglang.benchmark.one_batch`` after ``load_plugins()``), LLaMA-3-8B dimensions with
dummy weights, ``--attention-backend triton``, graphs off, one decode step at batch 32, context 1024,
``ASTRA_SGLANG_PATCHES=all`` (so the fused_add_rmsnorm rows are the patch's own kernel)."""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_sglang.profile import attribution as at
from astra_sglang.profile.trace import summarize

ROOT = Path(__file__).resolve().parents[1]
TRACE = Path(__file__).parent / "h_fixtures" / "profile" / "h200_llama3_8b_bs32_decode.trace.json.gz"


@pytest.fixture(scope="module")
def hot() -> at.HotList:
    return at.hot_list(summarize(TRACE, steps=1), at.build_map(ROOT / "extracted"), at.patch_info(), "decode", 32)


def test_recorded_decode_step_is_attributed_where_sglang_spends_it(hot: at.HotList) -> None:
    assert sum(r.share for r in hot.rows) == pytest.approx(100.0)
    assert 5500 < hot.gpu_us_per_step < 6500  # 6.0 ms of GPU kernels a decode step at batch 32
    by_op: dict[str, float] = {}
    for r in hot.rows:
        by_op[r.op] = by_op.get(r.op, 0.0) + r.share
    assert by_op["GEMM"] == pytest.approx(69.1, abs=1.0)  # cuBLAS nvjet + split-K reduce
    assert by_op["attention.decode_attention_fwd"] == pytest.approx(25.1, abs=1.0)  # stage 1 + stage 2
    norm = next(r for r in hot.rows if "fused_add_rmsnorm" in r.kernel)
    assert norm.status.startswith("patched by fused-add-rmsnorm-mr-k4") and norm.calls_per_step == 64
    assert at.top_ops([hot])[0].op_id == "attention.decode_attention_fwd"
