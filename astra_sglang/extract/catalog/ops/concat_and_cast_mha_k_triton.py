"""MLA prefill key assembly (Triton ``attention/mla_qk_prep.py``): k[t, h] = [k_nope[t, h], k_rope[t, 0]].

DeepSeek-style MLA's MHA prefill path (``forward_mha.py``) builds the full per-head key from the decompressed
no-rope part and the one rope part shared by every head; head counts that are not a power of two (Kimi-K3's
96 heads at TP8 = 12) take the masked variant.
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import Dim, ShapeCase, Signature, TensorArg
from astra_sglang.extract.catalog.base import CatalogEntry, exact_tolerances
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import DECODE_T, PREFILL_T, case, dedup

_MODULE = "sglang.kernels.ops.attention.mla_qk_prep"
_DTYPES = ["bfloat16", "float16", "float32"]
_HEADS = {"DeepSeek-V3": 128, "Kimi-K2": 64, "Kimi-K3": 96}


def _shapes() -> list[ShapeCase]:
    cases: list[ShapeCase] = []
    i = 0
    for name, heads in _HEADS.items():
        for tp in (1, 2, 4, 8):
            h = heads // tp
            cases.append(case(["prefill"], f"{name} TP{tp} prefill", T=PREFILL_T[i % 4], H=h, N=128, R=64))
            i += 1
    cases += [case(["edge"], "edge: one token", T=1, H=16, N=128, R=64),
              case(["edge", "decode"], "edge: short extend (decode-sized chunk)", T=DECODE_T[2], H=12, N=128,
                   R=64)]
    return dedup(cases)


def reference(**args):
    nope, rope = args["k_nope"], args["k_rope"]
    k = args["k"]
    return {"k": torch.cat([nope, rope.expand(-1, nope.shape[1], -1)], dim=-1).to(k.dtype)}


REFERENCE = FileText(
    doc=(
        "Reference for concat_and_cast_mha_k_triton (astra-sglang, written): torch.cat of the per-head\n"
        "no-rope part and the rope part broadcast over heads."
    ),
    imports=("import torch",),
    functions=(reference,),
)


ENTRY = CatalogEntry(
    short_name="concat_and_cast_mha_k_triton",
    op_id="attention.concat_and_cast_mha_k_triton",
    entry_point=f"{_MODULE}:concat_and_cast_mha_k_triton",
    kind="triton",
    signature=Signature(
        dims=[Dim(name="T", meaning="tokens"), Dim(name="H", meaning="heads (after TP)"),
              Dim(name="N", meaning="qk_nope_head_dim (a power of two for tl.arange)", min=128, max=128),
              Dim(name="R", meaning="qk_rope_head_dim (a power of two)", min=64, max=64)],
        tensors=[
            TensorArg(name="k", role="output", shape=["T", "H", "N+R"], dtype="{dtype}"),
            TensorArg(name="k_nope", role="input", shape=["T", "H", "N"], dtype="{dtype}"),
            TensorArg(name="k_rope", role="input", shape=["T", "1", "R"], dtype="{dtype}"),
        ],
        dtypes=_DTYPES,
        relations=["k[t, h, :N] = k_nope[t, h]; k[t, h, N:] = k_rope[t, 0] for every head h"],
        returns=[],
    ),
    reference=REFERENCE,
    shapes=_shapes,
    call=["k", "k_nope", "k_rope"],
    wrapper=f"{_MODULE}:concat_and_cast_mha_k_triton",
    tolerances=exact_tolerances(_DTYPES),
    callsite_modules=(_MODULE,),
    serving_sites={
        "sglang.srt.models.deepseek_common.attention_forward_methods.forward_mha:concat_and_cast_mha_k_triton":
        "DeepSeek-V2/V3/Kimi MHA prefill (forward_normal_prepare)",
        "sglang.srt.models.sarvam_moe:concat_and_cast_mha_k_triton": "Sarvam MoE MLA prefill",
    },
    notes=["A copy (same dtype in and out here): tolerance 0.",
           "N and R are fixed at DeepSeek's 128/64: the kernel's tl.arange needs powers of two and every served "
           "MLA model uses these; SGLang passes a strided k_nope view, the contract a contiguous one."],
)

