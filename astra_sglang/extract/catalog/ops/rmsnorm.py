"""rmsnorm: JIT RMSNorm (``elementwise/rmsnorm.cuh``), specialised on the hidden size, so the folder pins
one width (see ``_norm``).
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import Dim, ShapeCase, Signature, TensorArg, op_id_of
from astra_sglang.extract.catalog._norm import EPS, MODULE
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import (
    DECODE_T,
    PREFILL_T,
    case,
    dedup,
)

_RMS_H = 4096


def _rms_shapes() -> list[ShapeCase]:
    return dedup(
        [case(["decode"], f"H={_RMS_H} (LLaMA-2-7B/LLaMA-3-8B/Mixtral) decode", T=t, H=_RMS_H) for t in DECODE_T]
        + [case(["prefill"], f"H={_RMS_H} prefill", T=t, H=_RMS_H) for t in PREFILL_T]
    )


def reference(**args):
    x = args["input"].float()
    eps = float(args.get("eps", 1e-6))
    return {"out": x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * args["weight"].float()}


REFERENCE = FileText(
    doc="Reference for rmsnorm (astra-sglang, written): float32 x * rsqrt(mean(x^2) + eps) * w.",
    imports=("import torch",),
    functions=(reference,),
)


ENTRY = CatalogEntry(
    short_name="rmsnorm",
    op_id=op_id_of(f"{MODULE}:rmsnorm"),
    entry_point=f"{MODULE}:rmsnorm",
    kind="cuda_jit",
    signature=Signature(
        dims=[Dim(name="T", meaning="tokens"), Dim(name="H", meaning="hidden size (pinned)", min=_RMS_H, max=_RMS_H)],
        tensors=[
            TensorArg(name="input", role="input", shape=["T", "H"], dtype="{dtype}"),
            TensorArg(name="weight", role="input", shape=["H"], dtype="{dtype}"),
            TensorArg(name="out", role="output", shape=["T", "H"], dtype="{dtype}"),
        ],
        scalars=[EPS],
        dtypes=["bfloat16", "float16"],
        relations=["out = input * rsqrt(mean(input^2, -1) + eps) * weight",
                   f"the build is specialised to H = {_RMS_H} (template argument)"],
    ),
    reference=REFERENCE,
    shapes=_rms_shapes,
    call=["input", "weight", "out", "eps"],
    builder=f"{MODULE}:_jit_rmsnorm_module",
    builder_args={"bfloat16": (_RMS_H, "torch.bfloat16"), "float16": (_RMS_H, "torch.float16")},
    entry_export="rmsnorm",
    callsite_modules=(MODULE, "sglang.srt.layers.layernorm"),
    serving_sites={f"{MODULE}:rmsnorm": "the JIT wrapper"},
    notes=[f"pinned to H={_RMS_H}: SGLang picks the kernel class and template from the hidden size"],
)
