"""relu2: out = relu(x) ** 2 (squared-ReLU MLPs), SGLang's JIT run_unary_activation."""

from __future__ import annotations

import torch

from astra_sglang.contract.op import Dim, ShapeCase, Signature, TensorArg, op_id_of
from astra_sglang.extract.catalog._activation_jit import BUILDER, BUILDER_ARGS, DTYPES, MODULE
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import case, decode_prefill, dedup, model_widths


def reference(**args):
    x = args["input"].float()
    return {"out": torch.relu(x) ** 2}


REFERENCE = FileText(
    doc="Reference for relu2 (astra-sglang, written): float32, out = relu(x) ** 2.",
    imports=("import torch",),
    functions=(reference,),
)


def _shapes() -> list[ShapeCase]:
    widths = model_widths(lambda m, tp: m.intermediate // tp if m.intermediate % tp == 0 else None)
    return dedup(
        [
            *decode_prefill(({"H": w}, src) for w, src in widths),
            case(["edge", "decode"], "edge: one token", T=1, H=14336),
            case(["edge"], "edge: one vector", T=3, H=8),
        ]
    )


ENTRY = CatalogEntry(
    short_name="relu2",
    op_id=op_id_of(f"{MODULE}:relu2"),
    entry_point=f"{MODULE}:relu2",
    kind="cuda_jit",
    signature=Signature(
        dims=[Dim(name="T", meaning="tokens"), Dim(name="H", meaning="width", multiple_of=8)],
        tensors=[
            TensorArg(name="input", role="input", shape=["T", "H"], dtype="{dtype}"),
            TensorArg(name="out", role="output", shape=["T", "H"], dtype="{dtype}"),
        ],
        dtypes=list(DTYPES),
        relations=["out = relu(input)^2 elementwise", "T*H*sizeof(dtype) must be a multiple of 16 bytes"],
    ),
    reference=REFERENCE,
    shapes=_shapes,
    call=["input", "out", "'relu2'"],
    builder=BUILDER,
    builder_args=dict(BUILDER_ARGS),
    entry_export="run_unary_activation",
    callsite_modules=("sglang.kernels.ops.activation",),
    serving_sites={f"{MODULE}:relu2": "the JIT wrapper (squared-ReLU MLPs)"},
    notes=["fast_math=True build (the default of relu2); SGLang disables it to keep bf16 subnormals exact."],
)
