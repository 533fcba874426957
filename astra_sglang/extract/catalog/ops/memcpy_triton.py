"""DP-attention token gather (Triton ``memory/memcpy_triton.py``): copy this rank's rows into the global buffer
at a device-side offset, so CUDA graphs need no host sync (``srt/layers/dp_attention.py``).

``memcpy(global_tokens, local_tokens, 0, local_start_pos, local_num_tokens, False)`` in _dp_gather (hidden
states or input ids of this DP rank into the buffer all ranks all-reduce); the offset_src=True direction (the
scatter back) is the same kernel with the offset on the source side.
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import Dim, ShapeCase, Signature, TensorArg
from astra_sglang.extract.catalog.base import CatalogEntry, exact_tolerances
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import DECODE_T, MODELS, PREFILL_T, case, dedup

_MODULE = "sglang.kernels.ops.memory.memcpy_triton"
_DTYPES = ["bfloat16", "float16", "float32", "int32"]


def _shapes() -> list[ShapeCase]:
    # L local tokens of one DP rank, X = tokens of the other ranks (DP 2..8 with similar loads), W = hidden
    widths = sorted({m.hidden: m.name for m in MODELS}.items())
    cases = [case(["decode"], f"{name} DP{dp} decode, {t} tokens per rank", L=t, X=(dp - 1) * t, W=w)
             for i, ((w, name), t, dp) in enumerate(zip(widths, DECODE_T[1:], (2, 4, 8, 8)))]
    cases += [case(["prefill"], f"{name} DP{dp} prefill chunk", L=t // dp, X=t - t // dp, W=w)
              for (w, name), t, dp in zip(widths, PREFILL_T, (2, 4, 8, 4))]
    cases += [case(["edge", "decode"], "edge: input ids (one column), one token", L=1, X=7, W=1),
              case(["edge"], "edge: this rank is the last one (X before it)", L=3, X=0, W=7168)]
    return dedup(cases)


def reference(**args):
    dst = args["dst"].clone()
    o, n = int(args["offset"]), int(args["sz"])
    dst[o:o + n] = args["src"][:n]
    return {"dst": dst}


def make_inputs(dims, dtype, gen, device):
    offset = torch.randint(0, dims["X"] + 1, (), generator=gen, device=device)
    return {"offset": offset, "sz": torch.tensor(dims["L"], dtype=torch.int64, device=device)}


REFERENCE = FileText(
    doc=(
        "Reference for memcpy_triton (astra-sglang, written; restates dp_attention.memcpy_cpu with\n"
        "offset_src=False): rows [offset, offset + sz) of dst get src's first sz rows."
    ),
    functions=(reference,),
)

INPUTS = FileText(
    doc=(
        "Inputs for memcpy_triton (astra-sglang, written): this rank's start row in the global buffer\n"
        "(the sum of the earlier ranks' tokens, anywhere in [0, X]) and its token count L, as the 0-dim int64 device\n"
        "tensors SGLang's cumsum gives."
    ),
    imports=("import torch",),
    functions=(make_inputs,),
)


ENTRY = CatalogEntry(
    short_name="memcpy_triton",
    op_id="memory.memcpy_triton",
    entry_point=f"{_MODULE}:memcpy_triton",
    kind="triton",
    signature=Signature(
        dims=[Dim(name="L", meaning="this DP rank's tokens"),
              Dim(name="X", meaning="the other DP ranks' tokens", min=0),
              Dim(name="W", meaning="row width (hidden size, or 1 for input ids)")],
        tensors=[
            TensorArg(name="dst", role="inplace", shape=["L+X", "W"], dtype="{dtype}", align_bytes=4),
            TensorArg(name="src", role="input", shape=["L", "W"], dtype="{dtype}", align_bytes=4),
            TensorArg(name="offset", role="input", shape=[], dtype="int64", align_bytes=8, generated=True),
            TensorArg(name="sz", role="input", shape=[], dtype="int64", align_bytes=8, generated=True),
        ],
        dtypes=_DTYPES,
        relations=["dst[offset : offset + sz] = src[:sz]; other rows of dst untouched",
                   "0 <= offset <= X; sz = L (local_num_tokens)"],
        returns=[],
    ),
    reference=REFERENCE,
    shapes=_shapes,
    call=["dst", "src", "0", "offset", "sz", "False"],
    wrapper=f"{_MODULE}:memcpy_triton",
    tolerances=exact_tolerances(_DTYPES),
    forward_native="sglang.srt.layers.dp_attention:memcpy_cpu",
    callsite_modules=(_MODULE,),
    serving_sites={"sglang.srt.layers.dp_attention:memcpy_triton": "dp_attention.memcpy on GPU: _dp_gather "
                   "(offset on the destination, the direction this contract states) and dp_scatter"},
    inputs=INPUTS,
    notes=["A copy: tolerance 0."],
)

