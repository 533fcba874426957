"""Row-wise argmax over wide float32 rows (Triton ``speculative/row_argmax.py``): greedy picks of samplers.

``row_argmax(x) = x.argmax(-1)`` serves the Gumbel/exponential-race sampler of speculative decoding
(``srt/speculative/spec_utils.py``); ``div_argmax(x, d) = (x / d).argmax(-1)`` the exponential-race sampler of
the Gemma-4 diffusion denoiser (``srt/dllm/algorithm/gemma4_renoise.py``). Ties go to the lowest index, like
torch.argmax; the division is IEEE round-to-nearest in both (tl.div_rn, torch's float32 ``/``).
"""

from __future__ import annotations

from astra_sglang.contract.op import Dim, ShapeCase, Signature, TensorArg
from astra_sglang.extract.catalog.base import CatalogEntry, exact_tolerances
from astra_sglang.extract.shapes import DECODE_T, case, dedup

_MODULE = "sglang.kernels.ops.speculative.row_argmax"
_VOCAB = {"LLaMA-2": 32000, "LLaMA-3": 128256, "Qwen2.5": 152064, "Gemma": 262144}


def _shapes() -> list[ShapeCase]:
    cases: list[ShapeCase] = []
    for i, (name, v) in enumerate(_VOCAB.items()):
        for j, t in enumerate(DECODE_T):
            if (i + j) % 2 == 0:
                cases.append(case(["decode"], f"{name} vocab, {t} rows (requests x draft tokens)", R=t, V=v))
    cases += [
        case(["edge", "decode"], "edge: one row", R=1, V=128256),
        case(["edge"], "edge: 64 rows (last of the split-64 path)", R=64, V=32000),
        case(["edge"], "edge: 65 rows (first of the medium path)", R=65, V=32000),
        case(["edge"], "edge: 257 rows (medium path, 8192-wide blocks)", R=257, V=151936),
        case(["edge"], "edge: vocab not a multiple of any block", R=7, V=1000),
        # CPU (interpreter) shapes: small rows with tails (see the notes for the rows > 64 path)
        case(["test", "edge"], "CPU: one row", R=1, V=5),
        case(["test", "edge"], "CPU: split-64 path, rows of unequal split tails", R=5, V=130),
    ]
    return dedup(cases)


def _dims() -> list[Dim]:
    return [Dim(name="R", meaning="rows (requests, or requests x draft tokens)"), Dim(name="V", meaning="vocab")]


ROW_ARGMAX = CatalogEntry(
    short_name="row_argmax",
    op_id="speculative.row_argmax",
    entry_point=f"{_MODULE}:row_argmax",
    kind="triton",
    signature=Signature(
        dims=_dims(),
        tensors=[
            TensorArg(name="x", role="input", shape=["R", "V"], dtype="float32", align_bytes=4),
            TensorArg(name="index", role="output", shape=["R"], dtype="int64", align_bytes=8),
        ],
        dtypes=["float32"],
        relations=["index[r] = the lowest v with x[r, v] == max(x[r, :])"],
        returns=["index"],
    ),
    reference='''"""Reference for row_argmax (astra-sglang, written): torch.argmax, which returns the first maximum."""


def reference(**args):
    return {"index": args["x"].argmax(dim=-1)}
''',
    shapes=_shapes,
    call=["x"],
    wrapper=f"{_MODULE}:row_argmax",
    tolerances=exact_tolerances(["float32"]),
    callsite_modules=(_MODULE, "sglang.srt.speculative.spec_utils"),
    serving_sites={"sglang.srt.speculative.spec_utils:row_argmax": "speculative sampling with one sample per "
                   "row: argmax of float32 probs / exponential noise (the Gumbel-max trick)"},
    notes=["The output is an index: compared exactly (the float32 tolerance entry is never used for it).",
           "rows <= 64: 64 splits of 2048-wide tiles then a final reduce; rows > 64: 4096/8192-wide blocks.",
           "The CPU test shapes reach only the rows <= 64 path: the interpreter runs the medium path's tl.reduce "
           "with a custom combine for ~400 s on 65 rows; the manifest's R=65/257 edge cases check it on a GPU."],
)

DIV_ARGMAX = CatalogEntry(
    short_name="div_argmax",
    op_id="speculative.div_argmax",
    entry_point=f"{_MODULE}:div_argmax",
    kind="triton",
    signature=Signature(
        dims=_dims(),
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
    reference='''"""Reference for div_argmax (astra-sglang, written): the first maximum of the float32 quotient."""


def reference(**args):
    return {"index": (args["x"] / args["divisor"]).argmax(dim=-1)}
''',
    shapes=_shapes,
    call=["x", "divisor"],
    wrapper=f"{_MODULE}:div_argmax",
    tolerances=exact_tolerances(["float32"]),
    callsite_modules=(_MODULE,),
    serving_sites={f"{_MODULE}:div_argmax": "Gemma-4 diffusion denoiser sampling (imported inside "
                   "_sample_denoiser on CUDA): argmax of probabilities / Exp(1) noise"},
    inputs='''"""Inputs for div_argmax (astra-sglang, written): the Exp(1) noise SGLang's denoiser divides by,
clamped away from 0 like the speculative sampler's noise (an exact 0 never reaches the kernel)."""

import torch


def make_inputs(dims, dtype, gen, device):
    noise = torch.empty(dims["R"], dims["V"], dtype=torch.float32, device=device).exponential_(1.0, generator=gen)
    return {"divisor": noise.clamp_min_(torch.finfo(torch.float32).tiny)}
''',
    notes=["The output is an index: compared exactly."],
)

ENTRIES = [ROW_ARGMAX, DIV_ARGMAX]
