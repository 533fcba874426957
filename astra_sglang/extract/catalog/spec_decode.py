"""Small speculative-decoding kernels: the greedy top-1 draft step and the CUDA-graph verify-length padding.

draft_topk1_postprocess (``speculative/topk1.py``): EAGLE's topk=1 draft step: argmax of every row's draft
logits, topk_p = 1, positions += 1, and optionally the token written into a column of the draft-token buffer.
pad_verify_lens_to_bucket_triton (``speculative/ragged_verify_kernels.py``): ragged verify pads a batch of bs
requests to the captured padded_bs so the lengths sum to the graph's token count.
"""

from __future__ import annotations

from astra_sglang.contract.op import Dim, ScalarArg, ShapeCase, Signature, TensorArg
from astra_sglang.extract.catalog.base import CatalogEntry, exact_tolerances
from astra_sglang.extract.shapes import DECODE_T, case, dedup

_TOPK1 = "sglang.kernels.ops.speculative.topk1"
_RAGGED = "sglang.kernels.ops.speculative.ragged_verify_kernels"
_VOCAB = {"LLaMA-3 (EAGLE-3 draft)": 128256, "Qwen2.5": 152064, "DeepSeek-V3 (MTP)": 129280, "GLM-4.5": 151552}


def _topk1_shapes() -> list[ShapeCase]:
    cases = [case(["decode"], f"{name} vocab, {t} requests", B=t, V=v, W=4)
             for i, (name, v) in enumerate(_VOCAB.items()) for t in DECODE_T[i % 2::2]]
    cases += [case(["edge", "decode"], "edge: one request", B=1, V=128256, W=1),
              case(["edge"], "edge: vocab not a multiple of the 8192 split", B=3, V=1000, W=8)]
    return dedup(cases)


DRAFT_TOPK1 = CatalogEntry(
    short_name="draft_topk1_postprocess",
    op_id="speculative.draft_topk1_postprocess",
    entry_point=f"{_TOPK1}:draft_topk1_postprocess",
    kind="triton",
    signature=Signature(
        dims=[Dim(name="B", meaning="requests"), Dim(name="V", meaning="draft vocab"),
              Dim(name="W", meaning="columns of the draft-token buffer (speculative steps)")],
        tensors=[
            TensorArg(name="next_token_logits", role="input", shape=["B", "V"], dtype="{dtype}", align_bytes=4),
            TensorArg(name="positions", role="inplace", shape=["B"], dtype="int64", align_bytes=8, generated=True),
            TensorArg(name="draft_tokens", role="inplace", shape=["B", "W"], dtype="int64", align_bytes=8),
            TensorArg(name="topk_p", role="output", shape=["B", "1"], dtype="float32", align_bytes=4),
            TensorArg(name="topk_index", role="output", shape=["B", "1"], dtype="int64", align_bytes=8),
        ],
        scalars=[ScalarArg(name="draft_token_column", type="int", default=0, meaning="the draft step written")],
        dtypes=["float32", "bfloat16", "float16"],
        relations=["topk_index[b, 0] = first argmax of float32(logits[b]) with NaN read as -1e30",
                   "topk_p = 1.0; positions += 1; draft_tokens[b, draft_token_column] = topk_index[b, 0]"],
        returns=["topk_p", "topk_index"],
    ),
    reference='''"""Reference for draft_topk1_postprocess (astra-sglang, written): greedy top-1 of the float32 logits
(NaN never wins: read as -1e30 like the kernel; ties go to the lowest index like torch.argmax)."""

import torch


def reference(**args):
    x = args["next_token_logits"].float()
    x = torch.where(torch.isnan(x), torch.full_like(x, -1e30), x)
    index = x.argmax(dim=-1, keepdim=True)
    tokens = args["draft_tokens"].clone()
    tokens[:, args["draft_token_column"]] = index[:, 0]
    return {"topk_p": torch.ones_like(index, dtype=torch.float32), "topk_index": index,
            "positions": args["positions"] + 1, "draft_tokens": tokens}
''',
    shapes=_topk1_shapes,
    call=["next_token_logits", "positions", "draft_tokens", "draft_token_column"],
    wrapper=f"{_TOPK1}:draft_topk1_postprocess",
    tolerances=exact_tolerances(["float32", "bfloat16", "float16"]),
    callsite_modules=(_TOPK1,),
    serving_sites={"sglang.srt.speculative.eagle_worker_v2:draft_topk1_postprocess": "EAGLE v2 draft loop with "
                   "topk=1 (read from source: the worker module imports only on CUDA)"},
    inputs='''"""Inputs for draft_topk1_postprocess (astra-sglang, written): each request's current position (a
context length below 32k) and the draft step (column) this call writes."""

import torch


def make_inputs(dims, dtype, gen, device):
    return {"positions": torch.randint(0, 32768, (dims["B"],), generator=gen, device=device)}


def scalars(dims, dtype):
    return {"draft_token_column": dims["W"] // 2}
''',
    inputs_scalars=True,
    notes=["Every output is an index, a count or the constant 1.0: compared exactly.",
           "Ties: the kernel takes each split's first maximum (tl.argmax) and the first split holding the "
           "overall maximum, i.e. the first maximum, like torch.argmax."],
)

_PAD_REFERENCE = '''"""Reference for pad_verify_lens_to_bucket_triton (astra-sglang, written; restates SGLang's torch
pad_verify_lens_to_bucket): the leftover graph tokens are spread over the padding requests (the first rem get
one more), or added to the last real request when there is no padding request."""

import torch


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
'''

PAD_VERIFY_LENS = CatalogEntry(
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
    reference=_PAD_REFERENCE,
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
    inputs='''"""Inputs for pad_verify_lens_to_bucket_triton (astra-sglang, written): each real request verifies
1..Q tokens; the captured graph holds (B+P)*Q tokens for B+P request slots."""

import torch


def make_inputs(dims, dtype, gen, device):
    return {"lens": torch.randint(1, dims["Q"] + 1, (dims["B"],), generator=gen, device=device)
            .to(torch.int32)}


def scalars(dims, dtype):
    b, p = dims["B"], dims["P"]
    return {"graph_tokens": (b + p) * dims["Q"], "n_real": b, "n_padded": b + p}
''',
    inputs_scalars=True,
    notes=["Integer lengths: compared exactly."],
)

ENTRIES = [DRAFT_TOPK1, PAD_VERIFY_LENS]
