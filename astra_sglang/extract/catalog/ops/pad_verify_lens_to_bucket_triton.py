"""pad_verify_lens_to_bucket_triton: ragged verify pads a batch of bs requests to the captured
padded_bs so the lengths sum to the CUDA graph's token count (Triton ``speculative/ragged_verify_kernels.py``).
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import Dim, ScalarArg, Signature, TensorArg
from astra_sglang.extract.catalog.base import CatalogEntry, exact_tolerances
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import case, dedup

_RAGGED = "sglang.kernels.ops.speculative.ragged_verify_kernels"


def reference(**args):
    lens, bs, padded_bs = args["lens"].to(torch.int32), args["n_real"], args["n_padded"]
    leftover = args["graph_tokens"] - int(lens.long().sum())
    n_pad = padded_bs - bs
    if n_pad > 0:
        base, rem = leftover // n_pad, leftover % n_pad
        pad = base + (torch.arange(n_pad, device=lens.device) < rem).long()
        return {"padded": torch.cat([lens, pad.to(torch.int32)])}
    out = lens.clone()
    out[-1] = out[-1] + leftover
    return {"padded": out}


def make_inputs(dims, dtype, gen, device):
    return {"lens": torch.randint(1, dims["Q"] + 1, (dims["B"],), generator=gen, device=device)
            .to(torch.int32)}


def scalars(dims, dtype):
    b, p = dims["B"], dims["P"]
    return {"graph_tokens": (b + p) * dims["Q"], "n_real": b, "n_padded": b + p}


REFERENCE = FileText(
    doc=(
        "Reference for pad_verify_lens_to_bucket_triton (astra-sglang, written; restates SGLang's torch\n"
        "pad_verify_lens_to_bucket): the leftover graph tokens are spread over the padding requests (the first rem get\n"
        "one more), or added to the last real request when there is no padding request."
    ),
    imports=("import torch",),
    functions=(reference,),
)

INPUTS = FileText(
    doc=(
        "Inputs for pad_verify_lens_to_bucket_triton (astra-sglang, written): each real request verifies\n"
        "1..Q tokens; the captured graph holds (B+P)*Q tokens for B+P request slots."
    ),
    imports=("import torch",),
    functions=(make_inputs, scalars),
)


ENTRY = CatalogEntry(
    short_name="pad_verify_lens_to_bucket_triton",
    op_id="speculative.pad_verify_lens_to_bucket",
    entry_point=f"{_RAGGED}:pad_verify_lens_to_bucket_triton",
    kind="triton",
    signature=Signature(
        dims=[Dim(name="B", meaning="real requests (bs)"),
              Dim(name="P", meaning="padding requests (padded_bs - bs)", min=0),
              Dim(name="Q", meaning="verify window per request (draft tokens)")],
        tensors=[
            TensorArg(name="lens", role="input", shape=["B"], dtype="int32", align_bytes=4, generated=True),
            TensorArg(name="padded", role="output", shape=["B+P"], dtype="int32", align_bytes=4),
        ],
        scalars=[ScalarArg(name="graph_tokens", type="int", meaning="graph_num_tokens = (B+P)*Q, the captured token count"),
                 ScalarArg(name="n_real", type="int", meaning="bs"),
                 ScalarArg(name="n_padded", type="int", meaning="padded_bs")],
        dtypes=["int32"],
        relations=["sum(padded) == graph_tokens; padded[:B] = lens when P > 0",
                   "1 <= lens[b] <= Q (verify_lens)"],
        returns=["padded"],
    ),
    reference=REFERENCE,
    shapes=lambda: dedup(
        [case(["decode"], f"ragged verify: {b} requests padded to {b + p}, {q} draft tokens", B=b, P=p, Q=q)
         for b, p, q in ((1, 0, 4), (3, 1, 4), (7, 1, 8), (30, 2, 4), (60, 4, 6), (100, 28, 4), (250, 6, 8))]
        + [case(["edge"], "edge: no padding request (leftover to the last real one)", B=12, P=0, Q=5),
           case(["edge"], "edge: more padding than real requests", B=2, P=14, Q=3)]),
    call=["verify_lens=lens", "graph_num_tokens=graph_tokens", "bs=n_real", "padded_bs=n_padded"],
    wrapper=f"{_RAGGED}:pad_verify_lens_to_bucket_triton",
    tolerances=exact_tolerances(["int32"]),
    forward_native=f"{_RAGGED}:pad_verify_lens_to_bucket",
    callsite_modules=(_RAGGED,),
    serving_sites={f"{_RAGGED}:PaddedToBucket": "RaggedVerifyLayout.padded_to_bucket on CUDA (PaddedToBucket."
                   "triton); the torch pad_verify_lens_to_bucket elsewhere"},
    inputs=INPUTS,
    inputs_scalars=True,
    notes=["Integer lengths: compared exactly."],
)
