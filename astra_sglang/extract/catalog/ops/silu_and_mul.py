"""silu_and_mul: out = silu(x[..., :H]) * x[..., H:], SGLang's JIT run_activation with 'silu'."""

from __future__ import annotations

import torch

from astra_sglang.extract.catalog._activation_jit import gated_entry
from astra_sglang.extract.catalog.source_text import FileText


def reference(**args):
    x = args["input"].float()
    h = x.shape[-1] // 2
    gate, up = x[..., :h], x[..., h:]
    return {"out": torch.nn.functional.silu(gate) * up}


REFERENCE = FileText(
    doc="Reference for silu_and_mul (astra-sglang, written): float32, out = silu(x[..., :H]) * x[..., H:].",
    imports=("import torch",),
    functions=(reference,),
)

ENTRY = gated_entry("silu_and_mul", "silu", REFERENCE)
