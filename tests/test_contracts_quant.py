"""The per_token_quant_fp8 contract (CUDA JIT, validated on the H200): what can be checked here on CPU.

The reference is held against a restatement of the kernel's float32 arithmetic (scale = absmax / 448,
q = fp8(clamp(x * (1 / scale)))) through the checker with the manifest's tolerances, for every dtype; a wrong
reference and the one-CTA kernel's zero-row answer (the finding in the manifest notes) must not pass.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from astra_sglang.checker import compare_to_reference, is_poison
from astra_sglang.contract.op import load_manifest
from astra_sglang.extract import catalog
from astra_sglang.extract.extractor import write_op
from astra_sglang.harness.shared.tensors import ArgSet

FP8 = torch.float8_e4m3fn


def _extract(name: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    entry = catalog.find(name)
    assert entry is not None
    return write_op(entry, tmp_path_factory.mktemp("quant")).path


@pytest.fixture(scope="module")
def op(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _extract("quantization.sgl_per_token_quant_fp8", tmp_path_factory)


@pytest.fixture(scope="module")
def group_op(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _extract("quantization.per_token_group_quant", tmp_path_factory)


def _reference(op: Path):
    spec = importlib.util.spec_from_file_location(f"ref_{op.name}", op / "reference.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.reference


def _kernel(x: torch.Tensor, guard_zero: bool = True) -> dict[str, torch.Tensor]:
    """per_token_quant_fp8's float32 arithmetic; guard_zero=False is the one-CTA kernel (no 1/0 guard)."""
    xf = x.float()
    scale = xf.abs().amax(-1, keepdim=True) / 448.0
    inv = (1.0 / scale) if not guard_zero else torch.where(scale == 0, torch.zeros_like(scale), 1.0 / scale)
    v = xf * inv
    v = torch.where(torch.isnan(v), torch.full_like(v, 448.0), v)  # fminf/fmaxf drop the NaN operand
    return {"output_q": v.clamp(-448.0, 448.0).to(FP8), "output_s": scale}


def _inputs(dtype: torch.dtype, t: int = 64, h: int = 1004, wide: bool = False) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(t, h, generator=gen)
    if wide:
        x = x * torch.pow(10.0, torch.empty_like(x).uniform_(-3.0, 3.0, generator=gen))
    return x.to(dtype)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("wide", [False, True])
def test_reference_agrees_with_the_kernels_arithmetic(op: Path, dtype: str, wide: bool) -> None:
    m = load_manifest(op)
    tol = m.tolerances[dtype]
    x = _inputs(getattr(torch, dtype), wide=wide)
    x[3] = 0  # a zero row: scale 0, q 0 (the warp kernel's guard)
    ref = _reference(op)(input=x)
    out = _kernel(x)
    for name in ("output_q", "output_s"):
        assert compare_to_reference(name, out[name], ref[name], tol) is None, name


def test_wrong_answers_are_rejected(op: Path) -> None:
    tol = load_manifest(op).tolerances["bfloat16"]
    x = _inputs(torch.bfloat16)
    ref = _reference(op)(input=x)
    int8_range = (x.float() * (127.0 / x.float().abs().amax(-1, keepdim=True))).to(FP8)
    assert compare_to_reference("output_q", int8_range, ref["output_q"], tol) is not None
    assert compare_to_reference("output_s", ref["output_s"] * (1 + 1e-4), ref["output_s"], tol) is not None
    x[5] = 0
    cta = _kernel(x, guard_zero=False)  # the finding: q = 448 on an all-zero row
    assert bool((cta["output_q"][5].float() == 448).all())
    m = compare_to_reference("output_q", cta["output_q"], _reference(op)(input=x)["output_q"], tol)
    assert m is not None and "(5, 0)" in m.detail


def test_fp8_output_buffers_are_poisoned_and_prefilled_finite(op: Path) -> None:
    m = load_manifest(op)
    a = ArgSet(m, {"T": 3, "H": 8}, "bfloat16", "cpu")
    a.fill("normal", torch.Generator().manual_seed(0))
    q = a.tensors["output_q"]
    assert q.view.dtype == FP8 and bool(is_poison(q.view).all()) and q.guards_intact()
    a.fill_outputs(finite=True)  # the harness's second prefill: 1234.5 does not fit e4m3 (max 448)
    assert bool(torch.isfinite(q.view.float()).all())


def test_recipe_is_the_sm90_build(op: Path) -> None:
    """SGLang's builder adds --use_fast_math only when get_jit_cuda_arch() is 9.0; this host has no GPU."""
    r = load_manifest(op).recipe
    assert "--use_fast_math" in r.cuda_cflags  # type: ignore[union-attr]
    assert r.template_args == {"bfloat16": "bf16_t", "float16": "fp16_t", "float32": "fp32_t"}  # type: ignore[union-attr]


def _group_kernel(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """PerTokenGroupQuantFlatKernel's float32 arithmetic: q = sat(x * (448 / amax)), s = amax * (1 / 448)."""
    t, h = x.shape
    g = x.float().reshape(t, h // 128, 128)
    amax = g.abs().amax(-1, keepdim=True).clamp_min(1e-10)
    q = (g * (torch.tensor(448.0) / amax)).clamp(-448, 448).reshape(t, h).to(FP8)
    return {"output_q": q, "output_s": (amax * torch.tensor(1 / 448.0, dtype=torch.float32)).reshape(t, h // 128)}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("wide", [False, True])
def test_group_reference_agrees_with_the_kernels_arithmetic(group_op: Path, dtype: str, wide: bool) -> None:
    tol = load_manifest(group_op).tolerances[dtype]
    x = _inputs(getattr(torch, dtype), t=16, h=7168, wide=wide)
    x[2, :128] = 0  # an all-zero group: amax floored at 1e-10, q 0
    ref, out = _reference(group_op)(input=x), _group_kernel(x)
    for name in ("output_q", "output_s"):
        assert compare_to_reference(name, out[name], ref[name], tol) is None, name


def test_group_reference_rejects_a_per_row_scale(group_op: Path) -> None:
    tol = load_manifest(group_op).tolerances["bfloat16"]
    x = _inputs(torch.bfloat16, t=8, h=1024, wide=True)
    ref = _reference(group_op)(input=x)
    per_row = _kernel(x)  # one scale per row instead of per 128-group
    assert compare_to_reference("output_q", per_row["output_q"], ref["output_q"], tol) is not None
