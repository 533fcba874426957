"""Patches of the two fused-MoE GEMMs, which SGLang calls through one function (``invoke_fused_moe_kernel``).

Each adapter takes only its own call form of that function, exactly as ``fused_experts_impl`` makes it (w1, then w2
with the routing weights), on host metadata (meta tensors: any device read raises); every form outside the
contracts (quantized, expert-parallel, TMA, fused sum, an unknown config key) is the original's. Two patches, one
per form, are chained on the one call site: one registration, each serving its own form and checked against
SGLang's original, run end to end under TRITON_INTERPRET=1 with a hand-written kernel (not model-written,
``tests/candidates/fused_moe_kernel/hand_written.py``) against the original rebuilt from the extracted folders.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
tl = pytest.importorskip("triton.language")

from astra_sglang.patches.adapters import get_adapter, make_guard  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TARGET = "sglang.kernels.ops.moe.fused_moe_triton_kernels.invoke_fused_moe_kernel"
CONFIG = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4,
          "num_stages": 5}


def sglang_calls(t: int = 3, tk: int = 2, e: int = 8, hidden: int = 128, inner: int = 64, bm: int = 16,
                 device: str = "meta", dtype: Any = torch.bfloat16) -> dict[str, tuple[tuple[Any, ...], dict[str, Any]]]:
    """fused_experts_impl's two calls for one unquantized layer, every expert local (filter_expert False)."""
    p = t * tk + e * (bm - 1)
    f = {"device": device}
    route = (torch.empty(t, tk, dtype=torch.float32, **f), torch.empty(t, tk, dtype=torch.int32, **f),
             torch.empty(p, dtype=torch.int32, **f), torch.empty(-(-p // bm), dtype=torch.int32, **f),
             torch.empty(1, dtype=torch.int32, **f))
    compute = tl.bfloat16 if dtype == torch.bfloat16 else tl.float16
    flags = (False, False, False, False, False)
    up = ((torch.empty(t, hidden, dtype=dtype, **f), torch.empty(e, 2 * inner, hidden, dtype=dtype, **f), None,
           torch.empty(t * tk, 2 * inner, dtype=dtype, **f), None, None, None, *route, False, tk, dict(CONFIG),
           compute, *flags),
          dict(block_shape=None, c_sorted=False, b_use_tma=False, filter_expert=False, fuse_swiglu=False))
    down = ((torch.empty(t * tk, inner, dtype=dtype, **f), torch.empty(e, hidden, inner, dtype=dtype, **f), None,
             torch.empty(t, tk, hidden, dtype=dtype, **f), None, None, None, *route, True, 1, dict(CONFIG), compute,
             *flags),
            dict(block_shape=None, a_use_tma=False, b_use_tma=False, filter_expert=False, fuse_sum_all_reduce=False,
                 router_topk=tk))
    return {"fused_moe_kernel": up, "fused_moe_down": down}


@pytest.mark.parametrize("op", ["fused_moe_kernel", "fused_moe_down"])
def test_each_adapter_takes_its_own_form_of_fused_experts_impls_calls_and_not_the_other(op: str):
    calls = sglang_calls()
    ad = get_adapter(op)
    args, kwargs = calls[op]
    p = ad.prepare(*args, **kwargs)
    assert p is not None and make_guard(ad.default_guard(), "meta")(p)
    assert list(p.args) == [*ad.tensor_names, *ad.scalar_names]
    gemm = {"H": 128, "I": 64} if op == "fused_moe_down" else {"N": 128, "K": 128}
    assert p.dims == {"T": 3, "TK": 2, "E": 8, **gemm, "BM": 16, "BN": 64, "BK": 64, "GM": 1, "NW": 4, "NS": 5}
    assert p.args["C"].shape == (3, 2, 128)  # SGLang's [T*TK, N] buffer as the contract's [T, TK, N] view
    other = next(o for o in calls if o != op)
    assert ad.prepare(*calls[other][0], **calls[other][1]) is None


def _refused() -> list[Any]:
    def up(**over: Any) -> Any:
        args, kwargs = sglang_calls()["fused_moe_kernel"]
        return args, {**kwargs, **over}

    def up_args(i: int, value: Any) -> Any:
        args, kwargs = sglang_calls()["fused_moe_kernel"]
        return args[:i] + (value,) + args[i + 1:], kwargs

    return [
        pytest.param(up(filter_expert=True), id="expert_parallel"),
        pytest.param(up(b_use_tma=True), id="tma"),
        pytest.param(up(c_sorted=True), id="c_sorted"),
        pytest.param(up(fuse_swiglu=True), id="fused_swiglu"),
        pytest.param(up(block_shape=[128, 128]), id="block_fp8"),
        pytest.param(up_args(16, True), id="fp8_w8a8"),
        pytest.param(up_args(2, torch.empty(8, 128, device="meta")), id="bias"),
        pytest.param(up_args(14, {**CONFIG, "USE_TMA": True}), id="unknown_config_key"),
        pytest.param(up_args(9, torch.empty(7, dtype=torch.int32, device="meta")), id="sort_not_moe_aligns_size"),
        pytest.param(up_args(15, tl.float16), id="compute_type_not_the_dtype"),
    ]


@pytest.mark.parametrize("form", _refused())
def test_every_call_form_outside_the_contracts_goes_to_the_original(form: Any):
    args, kwargs = form
    for op in ("fused_moe_kernel", "fused_moe_down"):
        assert get_adapter(op).prepare(*args, **kwargs) is None, op


def test_config_without_warps_and_stages_takes_tritons_defaults():
    """SGLang's default config (no tuned JSON for the shape) has no num_warps / num_stages: Triton's 4 and 3."""
    args, kwargs = sglang_calls()["fused_moe_kernel"]
    bare = {k: v for k, v in CONFIG.items() if k not in ("num_warps", "num_stages")}
    p = get_adapter("fused_moe_kernel").prepare(*args[:14], bare, *args[15:], **kwargs)
    assert p is not None and (p.dims["NW"], p.dims["NS"]) == (4, 3)


def test_two_moe_patches_chain_on_the_one_call_site_each_serving_its_form(tmp_path: Path, restored_op):
    """In a fresh interpreter with TRITON_INTERPRET=1 from its start: SGLang's kernel calls Triton's own @jit
    helpers (triton.language.extra.cuda), which this process may have imported compiled before any test set the
    variable, and a compiled helper cannot be called from an interpreted kernel."""
    restored_op("fused_moe_kernel")
    restored_op("fused_moe_down")
    if torch.cuda.is_available():
        pytest.skip("the CPU path")
    env = {**os.environ, "TRITON_INTERPRET": "1", "ASTRA_SGLANG_PATCHES_DIR": str(tmp_path / "patches"),
           "ASTRA_SGLANG_STATE_FILE": str(tmp_path / "state.json"), "PYTHONPATH": str(REPO)}
    run = subprocess.run([sys.executable, str(Path(__file__).parent / "moe_chain_scenario.py"), str(tmp_path)],
                         capture_output=True, text=True, env=env, timeout=900, cwd=REPO)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    assert run.stdout.strip().splitlines()[-1] == "chained: up 2/1, down 1/1, one registration"


def test_two_patches_of_one_op_or_of_ops_not_sharing_forms_are_still_refused_on_one_call_site():
    from astra_sglang.patches.install import shares_target

    assert shares_target("fused_moe_kernel", "fused_moe_down")
    assert not shares_target("fused_moe_kernel", "fused_moe_kernel")
    assert not shares_target("merge_state", "fused_moe_down")
    assert not shares_target("silu_and_mul", "fused_add_rmsnorm")


def test_the_checks_samples_of_one_case_share_the_expert_weights_and_free_them():
    """The first-call check draws three samples of each case (original, patch, reference); the expert weights,
    which no call writes, are one copy among them (0.8 GB per copy at Qwen3-30B-A3B TP1 in bf16), freed with
    the samples. Everything else is per sample."""
    import gc
    import weakref

    ad = get_adapter("fused_moe_down")
    dims = {"T": 3, "TK": 2, "E": 4, "H": 64, "I": 32, "BM": 16, "BN": 32, "BK": 32, "GM": 1, "NW": 4, "NS": 2}
    (a1, k1), (a2, k2) = ad.sample(dims, torch.float16, "cpu", 5), ad.sample(dims, torch.float16, "cpu", 5)
    assert a1[1] is a2[1] and a1[0] is not a2[0] and a1[3] is not a2[3] and torch.equal(a1[0], a2[0])
    other = ad.sample(dims, torch.float16, "cpu", 6)[0]
    assert other[1] is not a1[1] and not torch.equal(other[1], a1[1])
    gone = weakref.ref(a1[1])
    del a1, a2, k1, k2, other
    gc.collect()
    assert gone() is None
