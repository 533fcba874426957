"""softcap_to_float32_logits: the softcap kernel writing cap * tanh(logits / cap) into a float32
output.
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import (
    Signature,
    TensorArg,
)
from astra_sglang.extract.catalog._softcap import CAP, MODULE, dims, shapes, trace
from astra_sglang.extract.catalog.base import DEFAULT_TOLERANCES, CatalogEntry
from astra_sglang.extract.catalog.source_text import FileText


def reference(**args):
    cap = float(args.get("softcap", 30.0))
    return {"output": torch.tanh(args["logits"].float() / cap) * cap}


REFERENCE = FileText(
    doc="Reference for softcap_to_float32_logits (astra-sglang, written): float32 softcap * tanh(x / softcap).",
    imports=("import torch",),
    functions=(reference,),
)


ENTRY = CatalogEntry(
    short_name="softcap_to_float32_logits",
    op_id="activation.softcap_to_float32_logits",
    entry_point=f"{MODULE}:softcap_to_float32_logits",
    kind="triton",
    signature=Signature(
        dims=dims(),
        tensors=[
            TensorArg(name="logits", role="input", shape=["T", "V"], dtype="{dtype}", align_bytes=4),
            TensorArg(name="output", role="output", shape=["T", "V"], dtype="float32", align_bytes=4),
        ],
        scalars=[CAP],
        dtypes=["bfloat16", "float16", "float32"],
        relations=["output = softcap * tanh(float32(logits) / softcap)"],
    ),
    reference=REFERENCE,
    shapes=shapes,
    call=["logits", "softcap", "output"],
    wrapper=f"{MODULE}:softcap_to_float32_logits",
    tolerances={d: DEFAULT_TOLERANCES["float32"] for d in ("bfloat16", "float16", "float32")},
    callsite_modules=(MODULE,),
    serving_sites={f"{MODULE}:softcap_to_float32_logits": "logits processor, fp32 logits with soft-capping"},
    trace_dims=trace,
    notes=["The output is float32 for every input dtype, so every dtype uses the float32 tolerance."],
)
