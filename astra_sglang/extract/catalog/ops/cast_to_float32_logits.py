"""cast_to_float32_logits: the softcap kernel with APPLY_SOFTCAP=False, a plain float32 cast of the
logits (exact).
"""

from __future__ import annotations

from astra_sglang.contract.op import (
    Signature,
    TensorArg,
    Tolerance,
)
from astra_sglang.extract.catalog._softcap import MODULE, dims, shapes, trace
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.catalog.source_text import FileText


def reference(**args):
    return {"output": args["logits"].float()}


REFERENCE = FileText(
    doc="Reference for cast_to_float32_logits (astra-sglang, written): an exact widening cast.",
    functions=(reference,),
)


ENTRY = CatalogEntry(
    short_name="cast_to_float32_logits",
    op_id="activation.cast_to_float32_logits",
    entry_point=f"{MODULE}:cast_to_float32_logits",
    kind="triton",
    signature=Signature(
        dims=dims(),
        tensors=[
            TensorArg(name="logits", role="input", shape=["T", "V"], dtype="{dtype}", align_bytes=4),
            TensorArg(name="output", role="output", shape=["T", "V"], dtype="float32", align_bytes=4),
        ],
        dtypes=["bfloat16", "float16"],
        relations=["output = float32(logits) (exact)"],
    ),
    reference=REFERENCE,
    shapes=shapes,
    call=["logits", "output"],
    wrapper=f"{MODULE}:cast_to_float32_logits",
    tolerances={d: Tolerance(atol=0.0, rtol=0.0) for d in ("bfloat16", "float16")},
    callsite_modules=(MODULE,),
    serving_sites={f"{MODULE}:cast_to_float32_logits": "logits processor, fp32 logits without soft-capping"},
    trace_dims=trace,
    notes=["Widening bf16/fp16 to float32 is exact: tolerance 0."],
)
