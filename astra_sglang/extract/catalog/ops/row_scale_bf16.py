"""Per-row scale ``out[r, :] = bf16(fp32(x[r, :]) * tau[r])`` (JIT ``inkling/inkling_row_scale.cuh``).

Used for log-scaling of attention queries (the q slice of a fused qkv projection): rows are tokens, the inner
width is the per-TP query width heads*head_dim.
"""

from __future__ import annotations

from astra_sglang.contract.op import Dim, ShapeCase, Signature, TensorArg, Tolerance
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import case, decode_prefill, dedup, model_widths

_MODULE = "sglang.kernels.ops.elementwise.row_scale"


def _shapes() -> list[ShapeCase]:
    widths = model_widths(lambda m, tp: m.heads * m.head_dim // tp if m.heads % tp == 0 else None)
    return dedup(
        [
            *decode_prefill(({"K": w}, src) for w, src in widths),
            case(["edge", "decode"], "edge: one token", T=1, K=4096),
            case(["edge"], "edge: one 16-byte vector per row", T=129, K=8),
        ]
    )


def reference(**args):
    return {"out": args["x"].float() * args["tau"].float().unsqueeze(-1)}


REFERENCE = FileText(
    doc="Reference for row_scale_bf16 (astra-sglang, written): float32 x * tau per row.",
    functions=(reference,),
)


ENTRY = CatalogEntry(
    short_name="row_scale_bf16",
    op_id="elementwise.row_scale_bf16",
    entry_point=f"{_MODULE}:row_scale_bf16",
    kind="cuda_jit",
    signature=Signature(
        dims=[Dim(name="T", meaning="rows (tokens)"), Dim(name="K", meaning="inner width", multiple_of=8)],
        tensors=[
            TensorArg(name="x", role="input", shape=["T", "K"], dtype="{dtype}"),
            TensorArg(name="tau", role="input", shape=["T"], dtype="float32", align_bytes=4),
            TensorArg(name="out", role="output", shape=["T", "K"], dtype="{dtype}"),
        ],
        dtypes=["bfloat16"],
        relations=["out[r, :] = bf16(float32(x[r, :]) * tau[r])", "K % 8 == 0, rows 16-byte aligned"],
    ),
    reference=REFERENCE,
    shapes=_shapes,
    call=["x", "tau", "out"],
    builder=f"{_MODULE}:_jit_row_scale_module",
    builder_args={"bfloat16": (True,)},
    entry_export="run",
    tolerances={"bfloat16": Tolerance(atol=8e-3, rtol=8e-3)},
    callsite_modules=(_MODULE,),
    serving_sites={f"{_MODULE}:row_scale_bf16": "the JIT wrapper"},
    notes=["One product rounded once to bf16: within half an ulp (2^-8 = 3.9e-3) of the float32 reference; "
           "tolerance 8e-3 = one ulp.", "template args: row_scale<use_pdl=true> (dtype-independent, bf16 only)"],
)

