"""div_argmax: ``(x / d).argmax(-1)``, the exponential-race sampler of the Gemma-4 diffusion denoiser
(Triton ``speculative/row_argmax.py``).
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import Signature, TensorArg
from astra_sglang.extract.catalog._argmax import MODULE, dims, shapes
from astra_sglang.extract.catalog.base import CatalogEntry, exact_tolerances
from astra_sglang.extract.catalog.source_text import FileText


def reference(**args):
    return {"index": (args["x"] / args["divisor"]).argmax(dim=-1)}


def make_inputs(dims, dtype, gen, device):
    noise = torch.empty(dims["R"], dims["V"], dtype=torch.float32, device=device).exponential_(1.0, generator=gen)
    return {"divisor": noise.clamp_min_(torch.finfo(torch.float32).tiny)}


REFERENCE = FileText(
    doc="Reference for div_argmax (astra-sglang, written): the first maximum of the float32 quotient.",
    functions=(reference,),
)

INPUTS = FileText(
    doc=(
        "Inputs for div_argmax (astra-sglang, written): the Exp(1) noise SGLang's denoiser divides by,\n"
        "clamped away from 0 like the speculative sampler's noise (an exact 0 never reaches the kernel)."
    ),
    imports=("import torch",),
    functions=(make_inputs,),
)


ENTRY = CatalogEntry(
    short_name="div_argmax",
    op_id="speculative.div_argmax",
    entry_point=f"{MODULE}:div_argmax",
    kind="triton",
    signature=Signature(
        dims=dims(),
        tensors=[
            TensorArg(name="x", role="input", shape=["R", "V"], dtype="float32", align_bytes=4),
            TensorArg(name="divisor", role="input", shape=["R", "V"], dtype="float32", align_bytes=4,
                      generated=True),
            TensorArg(name="index", role="output", shape=["R"], dtype="int64", align_bytes=8),
        ],
        dtypes=["float32"],
        relations=["index[r] = the lowest v with q[r, v] == max(q[r, :]), q = x / divisor (IEEE division)",
                   "divisor > 0 (exponential noise)"],
        returns=["index"],
    ),
    reference=REFERENCE,
    shapes=shapes,
    call=["x", "divisor"],
    wrapper=f"{MODULE}:div_argmax",
    tolerances=exact_tolerances(["float32"]),
    callsite_modules=(MODULE,),
    serving_sites={f"{MODULE}:div_argmax": "Gemma-4 diffusion denoiser sampling (imported inside "
                   "_sample_denoiser on CUDA): argmax of probabilities / Exp(1) noise"},
    inputs=INPUTS,
    notes=["The output is an index: compared exactly."],
)
