"""row_argmax: ``x.argmax(-1)`` over wide float32 rows, the Gumbel/exponential-race sampler of
speculative decoding (Triton ``speculative/row_argmax.py``).
"""

from __future__ import annotations

from astra_sglang.contract.op import Signature, TensorArg
from astra_sglang.extract.catalog._argmax import MODULE, dims, shapes
from astra_sglang.extract.catalog.base import CatalogEntry, exact_tolerances
from astra_sglang.extract.catalog.source_text import FileText


def reference(**args):
    return {"index": args["x"].argmax(dim=-1)}


REFERENCE = FileText(
    doc="Reference for row_argmax (astra-sglang, written): torch.argmax, which returns the first maximum.",
    functions=(reference,),
)


ENTRY = CatalogEntry(
    short_name="row_argmax",
    op_id="speculative.row_argmax",
    entry_point=f"{MODULE}:row_argmax",
    kind="triton",
    signature=Signature(
        dims=dims(),
        tensors=[
            TensorArg(name="x", role="input", shape=["R", "V"], dtype="float32", align_bytes=4),
            TensorArg(name="index", role="output", shape=["R"], dtype="int64", align_bytes=8),
        ],
        dtypes=["float32"],
        relations=["index[r] = the lowest v with x[r, v] == max(x[r, :])"],
        returns=["index"],
    ),
    reference=REFERENCE,
    shapes=shapes,
    call=["x"],
    wrapper=f"{MODULE}:row_argmax",
    tolerances=exact_tolerances(["float32"]),
    callsite_modules=(MODULE, "sglang.srt.speculative.spec_utils"),
    serving_sites={"sglang.srt.speculative.spec_utils:row_argmax": "speculative sampling with one sample per "
                   "row: argmax of float32 probs / exponential noise (the Gumbel-max trick)"},
    notes=["The output is an index: compared exactly (the float32 tolerance entry is never used for it).",
           "rows <= 64: 64 splits of 2048-wide tiles then a final reduce; rows > 64: 4096/8192-wide blocks.",
           "The CPU test shapes reach only the rows <= 64 path: the interpreter runs the medium path's tl.reduce "
           "with a custom combine for ~400 s on 65 rows; the manifest's R=65/257 edge cases check it on a GPU."],
)
