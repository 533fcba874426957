"""fused_inplace_qknorm: per-head RMSNorm of q and k in place (JIT ``elementwise/qknorm.cuh``),
specialised on head_dim, so the folder pins one (see ``_norm``).
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import Dim, ShapeCase, Signature, TensorArg, op_id_of
from astra_sglang.extract.catalog._norm import EPS, MODULE
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import (
    DECODE_T,
    MODELS,
    PREFILL_T,
    TP_SIZES,
    case,
    dedup,
)

_HEAD_DIM = 128


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


def _norm(x, w, eps):
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.float()


def reference(**args):
    eps = float(args.get("eps", 1e-6))
    return {"q": _norm(args["q"], args["q_weight"], eps), "k": _norm(args["k"], args["k_weight"], eps)}


REFERENCE = FileText(
    doc="Reference for fused_inplace_qknorm (astra-sglang, written): per-head float32 RMSNorm of q and k.",
    imports=("import torch",),
    functions=(_norm, reference),
)


ENTRY = CatalogEntry(
    short_name="fused_inplace_qknorm",
    op_id=op_id_of(f"{MODULE}:fused_inplace_qknorm"),
    entry_point=f"{MODULE}:fused_inplace_qknorm",
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
        scalars=[EPS],
        dtypes=["bfloat16", "float16"],
        relations=["q[t, h] <- rmsnorm(q[t, h]) * q_weight; k[t, h] <- rmsnorm(k[t, h]) * k_weight (per head)",
                   f"the build is specialised to head_dim = {_HEAD_DIM} (template argument)"],
    ),
    reference=REFERENCE,
    shapes=_qk_shapes,
    call=["q", "k", "q_weight", "k_weight", "eps"],
    builder=f"{MODULE}:_jit_qknorm_module",
    builder_args={"bfloat16": (_HEAD_DIM, "torch.bfloat16"), "float16": (_HEAD_DIM, "torch.float16")},
    entry_export="qknorm",
    aliases=("qknorm",),
    callsite_modules=(MODULE,),
    serving_sites={f"{MODULE}:fused_inplace_qknorm": "the JIT wrapper (QK-norm models, e.g. Qwen3)"},
    notes=[f"pinned to head_dim={_HEAD_DIM}, half_warp=True (SGLang's default)"],
)
