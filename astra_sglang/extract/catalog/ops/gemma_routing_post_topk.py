"""Gemma-4 MoE routing after top-k (Triton ``moe/gemma4_routing.py``): softmax over the top-k logits times a
learned per-expert scale, as float32 weights and int32 ids.

``srt/models/gemma4_causal.py`` calls it after torch.topk when the fused full routing kernel does not apply.
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import Dim, ShapeCase, Signature, TensorArg, Tolerance
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import DECODE_T, PREFILL_T, case, dedup

_MODULE = "sglang.kernels.ops.moe.gemma4_routing"
_DTYPES = ["bfloat16", "float16", "float32"]


def _shapes() -> list[ShapeCase]:
    # Gemma-4 26B-A4B: 128 experts (K + X), top-8
    cases = [case(["decode"], f"Gemma-4 MoE decode, {t} tokens", T=t, K=8, X=120) for t in DECODE_T]
    cases += [case(["prefill"], f"Gemma-4 MoE prefill, {t} tokens", T=t, K=8, X=120) for t in PREFILL_T[:4]]
    cases += [case(["edge"], "edge: top-k not a power of two", T=37, K=6, X=58),
              case(["edge"], "edge: top-1", T=16, K=1, X=127)]
    return dedup(cases)


def reference(**args):
    p = torch.softmax(args["topk_logits"].double(), dim=-1)
    ids = args["topk_ids"]
    scale = args["per_expert_scale"].double()[ids]
    return {"weights": (p * scale).float(), "ids": ids.to(torch.int32)}


def make_inputs(dims, dtype, gen, device):
    logits = torch.randn(dims["T"], dims["K"] + dims["X"], generator=gen, device=device)
    return {"topk_ids": logits.topk(dims["K"], dim=-1).indices}


REFERENCE = FileText(
    doc=(
        "Reference for gemma_routing_post_topk (astra-sglang, written): float64 softmax of the top-k\n"
        "logits times the gathered per-expert scale (SGLang's unfused torch expression)."
    ),
    imports=("import torch",),
    functions=(reference,),
)

INPUTS = FileText(
    doc=(
        "Inputs for gemma_routing_post_topk (astra-sglang, written): the top-k expert ids of random\n"
        "router logits over E = K + X experts (distinct per token, int64 as torch.topk returns them)."
    ),
    imports=("import torch",),
    functions=(make_inputs,),
)


ENTRY = CatalogEntry(
    short_name="gemma_routing_post_topk",
    op_id="moe.gemma_routing_post_topk",
    entry_point=f"{_MODULE}:gemma_routing_post_topk",
    kind="triton",
    signature=Signature(
        dims=[Dim(name="T", meaning="tokens"), Dim(name="K", meaning="top-k"),
              Dim(name="X", meaning="experts beyond K (E = K + X experts)", min=0)],
        tensors=[
            TensorArg(name="topk_logits", role="input", shape=["T", "K"], dtype="{dtype}", align_bytes=2),
            TensorArg(name="topk_ids", role="input", shape=["T", "K"], dtype="int64", align_bytes=8, generated=True),
            TensorArg(name="per_expert_scale", role="input", shape=["K+X"], dtype="float32", align_bytes=4),
            TensorArg(name="weights", role="output", shape=["T", "K"], dtype="float32", align_bytes=4),
            TensorArg(name="ids", role="output", shape=["T", "K"], dtype="int32", align_bytes=4),
        ],
        dtypes=_DTYPES,
        relations=["weights = softmax(float32(topk_logits), -1) * per_expert_scale[topk_ids]",
                   "ids = int32(topk_ids); topk_ids distinct experts per row in [0, K+X)"],
        returns=["weights", "ids"],
    ),
    reference=REFERENCE,
    shapes=_shapes,
    call=["topk_logits", "topk_ids", "per_expert_scale"],
    wrapper=f"{_MODULE}:gemma_routing_post_topk",
    # The output is float32 for every input dtype: a softmax over <= 8 terms (exp, sum, divide) and a
    # multiply, a few float32 roundings: the float32 tolerance (1e-5 relative ~ 80 ulp) for every dtype.
    tolerances={d: Tolerance(atol=1e-5, rtol=1e-5) for d in _DTYPES},
    callsite_modules=(_MODULE,),
    serving_sites={"sglang.srt.models.gemma4_causal:gemma_routing_post_topk": "Gemma-4 MoE routing after torch."
                   "topk (CUDA/XPU) when gemma4_fused_routing does not apply"},
    inputs=INPUTS,
    notes=["ids are compared exactly; weights with the float32 tolerance (the output dtype)."],
)

