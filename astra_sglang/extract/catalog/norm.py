"""JIT RMSNorm variants whose template arguments include a width: extracted for one width each.

``rmsnorm`` (``elementwise/rmsnorm.cuh``) is specialised on the hidden size (the kernel class and the first
template argument), ``fused_inplace_qknorm`` (``elementwise/qknorm.cuh``) on head_dim. The manifest's
template arguments are per dtype only, so each folder pins that width (Dim min == max) and says so.
"""

from __future__ import annotations

from astra_sglang.contract.op import Dim, ScalarArg, ShapeCase, Signature, TensorArg
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.shapes import (
    DECODE_T,
    MODELS,
    PREFILL_T,
    TP_SIZES,
    case,
    dedup,
)

_MODULE = "sglang.kernels.ops.layernorm.norm"
_RMS_H = 4096
_HEAD_DIM = 128
_EPS = ScalarArg(name="eps", type="float", default=1e-6, meaning="variance epsilon")


def _rms_shapes() -> list[ShapeCase]:
    return dedup(
        [case(["decode"], f"H={_RMS_H} (LLaMA-2-7B/LLaMA-3-8B/Mixtral) decode", T=t, H=_RMS_H) for t in DECODE_T]
        + [case(["prefill"], f"H={_RMS_H} prefill", T=t, H=_RMS_H) for t in PREFILL_T]
    )


RMSNORM = CatalogEntry(
    short_name="rmsnorm",
    op_id=f"{_MODULE}:rmsnorm",
    entry_point=f"{_MODULE}:rmsnorm",
    kind="cuda_jit",
    signature=Signature(
        dims=[Dim(name="T", meaning="tokens"), Dim(name="H", meaning="hidden size (pinned)", min=_RMS_H, max=_RMS_H)],
        tensors=[
            TensorArg(name="input", role="input", shape=["T", "H"], dtype="{dtype}"),
            TensorArg(name="weight", role="input", shape=["H"], dtype="{dtype}"),
            TensorArg(name="out", role="output", shape=["T", "H"], dtype="{dtype}"),
        ],
        scalars=[_EPS],
        dtypes=["bfloat16", "float16"],
        relations=["out = input * rsqrt(mean(input^2, -1) + eps) * weight",
                   f"the build is specialised to H = {_RMS_H} (template argument)"],
    ),
    reference='''"""Reference for rmsnorm (astra-sglang, written): float32 x * rsqrt(mean(x^2) + eps) * w."""

import torch


def reference(**args):
    x = args["input"].float()
    eps = float(args.get("eps", 1e-6))
    return {"out": x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * args["weight"].float()}
''',
    shapes=_rms_shapes,
    call=["input", "weight", "out", "eps"],
    builder=f"{_MODULE}:_jit_rmsnorm_module",
    builder_args={"bfloat16": (_RMS_H, "torch.bfloat16"), "float16": (_RMS_H, "torch.float16")},
    entry_export="rmsnorm",
    callsite_modules=(_MODULE, "sglang.srt.layers.layernorm"),
    serving_sites={f"{_MODULE}:rmsnorm": "the JIT wrapper"},
    notes=[f"pinned to H={_RMS_H}: SGLang picks the kernel class and template from the hidden size"],
)


def _qk_shapes() -> list[ShapeCase]:
    pairs: dict[tuple[int, int], str] = {}
    for m in MODELS:
        for tp in TP_SIZES:
            if m.heads % tp == 0:
                pairs.setdefault((m.heads // tp, max(1, m.kv_heads // tp)), f"{m.name} TP{tp}")
    cases = []
    for i, ((nq, nk), src) in enumerate(pairs.items()):
        cases.append(case(["decode"], f"{src} decode", T=DECODE_T[i % len(DECODE_T)], NQ=nq, NK=nk, D=_HEAD_DIM))
        cases.append(case(["prefill"], f"{src} prefill", T=PREFILL_T[i % len(PREFILL_T)], NQ=nq, NK=nk, D=_HEAD_DIM))
    cases.append(case(["edge", "decode"], "edge: one token", T=1, NQ=64, NK=8, D=_HEAD_DIM))
    return dedup(cases)


QKNORM = CatalogEntry(
    short_name="fused_inplace_qknorm",
    op_id=f"{_MODULE}:fused_inplace_qknorm",
    entry_point=f"{_MODULE}:fused_inplace_qknorm",
    kind="cuda_jit",
    signature=Signature(
        dims=[
            Dim(name="T", meaning="tokens"),
            Dim(name="NQ", meaning="query heads (after TP)"),
            Dim(name="NK", meaning="KV heads (after TP)"),
            Dim(name="D", meaning="head dim (pinned)", min=_HEAD_DIM, max=_HEAD_DIM),
        ],
        tensors=[
            TensorArg(name="q", role="inplace", shape=["T", "NQ", "D"], dtype="{dtype}"),
            TensorArg(name="k", role="inplace", shape=["T", "NK", "D"], dtype="{dtype}"),
            TensorArg(name="q_weight", role="input", shape=["D"], dtype="{dtype}"),
            TensorArg(name="k_weight", role="input", shape=["D"], dtype="{dtype}"),
        ],
        scalars=[_EPS],
        dtypes=["bfloat16", "float16"],
        relations=["q[t, h] <- rmsnorm(q[t, h]) * q_weight; k[t, h] <- rmsnorm(k[t, h]) * k_weight (per head)",
                   f"the build is specialised to head_dim = {_HEAD_DIM} (template argument)"],
    ),
    reference='''"""Reference for fused_inplace_qknorm (astra-sglang, written): per-head float32 RMSNorm of q and k."""

import torch


def _norm(x, w, eps):
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.float()


def reference(**args):
    eps = float(args.get("eps", 1e-6))
    return {"q": _norm(args["q"], args["q_weight"], eps), "k": _norm(args["k"], args["k_weight"], eps)}
''',
    shapes=_qk_shapes,
    call=["q", "k", "q_weight", "k_weight", "eps"],
    builder=f"{_MODULE}:_jit_qknorm_module",
    builder_args={"bfloat16": (_HEAD_DIM, "torch.bfloat16"), "float16": (_HEAD_DIM, "torch.float16")},
    entry_export="qknorm",
    aliases=("qknorm",),
    callsite_modules=(_MODULE,),
    serving_sites={f"{_MODULE}:fused_inplace_qknorm": "the JIT wrapper (QK-norm models, e.g. Qwen3)"},
    notes=[f"pinned to head_dim={_HEAD_DIM}, half_warp=True (SGLang's default)"],
)

ENTRIES = [RMSNORM, QKNORM]
