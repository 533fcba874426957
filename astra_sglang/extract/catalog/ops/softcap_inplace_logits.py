"""softcap_inplace_logits: logits <- cap * tanh(logits / cap) in place (Triton
``activation/softcap.py``).
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import (
    Signature,
    TensorArg,
    Tolerance,
)
from astra_sglang.extract.catalog._softcap import CAP, MODULE, dims, shapes, trace
from astra_sglang.extract.catalog.base import DEFAULT_TOLERANCES, CatalogEntry
from astra_sglang.extract.catalog.source_text import FileText

# In-place bf16/fp16 capping divides, takes tanh and multiplies in the storage dtype's promotion rules, so it
# can round more than once: allow 3 ulp for 2-byte dtypes.
_INPLACE_TOL = {
    "bfloat16": Tolerance(atol=2.4e-2, rtol=2.4e-2),
    "float16": Tolerance(atol=3e-3, rtol=3e-3),
    "float32": DEFAULT_TOLERANCES["float32"],
}


def reference(**args):
    cap = float(args.get("softcap", 30.0))
    return {"logits": torch.tanh(args["logits"].float() / cap) * cap}


REFERENCE = FileText(
    doc="Reference for softcap_inplace_logits (astra-sglang, written): float32 softcap * tanh(x / softcap).",
    imports=("import torch",),
    functions=(reference,),
)


ENTRY = CatalogEntry(
    short_name="softcap_inplace_logits",
    op_id="activation.softcap_inplace_logits",
    entry_point=f"{MODULE}:softcap_inplace_logits",
    kind="triton",
    signature=Signature(
        dims=dims(),
        tensors=[TensorArg(name="logits", role="inplace", shape=["T", "V"], dtype="{dtype}", align_bytes=4)],
        scalars=[CAP],
        dtypes=["float32", "bfloat16", "float16"],
        relations=["logits <- softcap * tanh(logits / softcap)"],
    ),
    reference=REFERENCE,
    shapes=shapes,
    call=["logits", "softcap"],
    wrapper=f"{MODULE}:softcap_inplace_logits",
    tolerances=_INPLACE_TOL,
    callsite_modules=(MODULE,),
    serving_sites={f"{MODULE}:softcap_inplace_logits": "logits processor (final_logit_softcapping models)"},
    trace_dims=trace,
)
