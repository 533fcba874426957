"""silu_and_mul_with_activation_rounding: silu_and_mul rounding silu(gate) to the input dtype (eager parity).

SGLang builds it without --use_fast_math (module 'rounded_activation') and calls run_activation_with_rounding.
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import op_id_of
from astra_sglang.extract.catalog._activation_jit import (
    BUILDER,
    BUILDER_ARGS,
    MODULE,
    gated_shapes,
    gated_signature,
    trace_gated,
)
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.catalog.source_text import FileText


def reference(**args):
    x = args["input"]
    h = x.shape[-1] // 2
    act = torch.nn.functional.silu(x[..., :h].float()).to(x.dtype).float()
    return {"out": act * x[..., h:].float()}


REFERENCE = FileText(
    doc=(
        "Reference for silu_and_mul_with_activation_rounding (astra-sglang, written): silu(gate) is rounded to the\n"
        "input dtype before the multiply (eager PyTorch order), then the product is computed in float32."
    ),
    imports=("import torch",),
    functions=(reference,),
)

ENTRY = CatalogEntry(
    short_name="silu_and_mul_with_activation_rounding",
    op_id=op_id_of(f"{MODULE}:silu_and_mul_with_activation_rounding"),
    entry_point=f"{MODULE}:silu_and_mul_with_activation_rounding",
    kind="cuda_jit",
    signature=gated_signature(),
    reference=REFERENCE,
    shapes=gated_shapes,
    call=["input", "out", "'silu'", "0.0"],
    builder=BUILDER,
    builder_args=dict(BUILDER_ARGS),
    builder_kwargs={"fast_math": False},
    entry_export="run_activation_with_rounding",
    callsite_modules=("sglang.kernels.ops.activation",),
    serving_sites={f"{MODULE}:silu_and_mul_with_activation_rounding": "the JIT wrapper (eager-parity SiLU)"},
    trace_dims=trace_gated,
    notes=["Built without --use_fast_math (module 'rounded_activation'), as SGLang does for eager parity; "
           "clamp_limit 0.0 = no clamping."],
)
