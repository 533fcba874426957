"""Bit-pack the speculative verify tree mask into FlashInfer's buffers (Triton ``speculative/pack_verify_mask.py``).

FlashInfer's prefill wrapper takes the custom attention mask of an EAGLE verify step as packed bits (little
bit order, like ``flashinfer.segment_packbits``): request b's [Q, kv_len_b] boolean block becomes
ceil(Q * kv_len_b / 8) bytes at packed_indptr[b] (``srt/layers/attention/flashinfer_backend.py``).
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import Dim, ScalarArg, ShapeCase, Signature, TensorArg
from astra_sglang.extract.catalog._ragged_batch import _lengths
from astra_sglang.extract.catalog.base import CatalogEntry, exact_tolerances
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import case, dedup

_MODULE = "sglang.kernels.ops.speculative.pack_verify_mask"


def _shapes() -> list[ShapeCase]:
    # EAGLE verify: Q = draft tokens per request (uniform width), K ~ context lengths
    cases = [case(["decode"], f"EAGLE verify: {b} requests, {q} draft tokens, ~{k} KV tokens", B=b, K=k, E=k, Q=q)
             for b, k, q in ((1, 1024, 4), (8, 2048, 4), (32, 512, 8), (64, 4096, 6), (16, 8192, 8))]
    cases += [case(["edge"], "edge: one request, one KV token", B=1, K=1, E=0, Q=1),
              case(["edge"], "edge: Q*kv_len not a multiple of 8", B=7, K=13, E=5, Q=3)]
    return dedup(cases)


def reference(**args):
    out = args["output"].clone()
    mask, q = args["mask"].reshape(-1), args["q_width"]
    kv, packed = args["kv_indptr"].tolist(), args["packed_indptr"].tolist()
    weights = 2 ** torch.arange(8, device=mask.device)
    for b in range(args["n_requests"]):
        bits = mask[kv[b] * q:kv[b + 1] * q].long()
        n = (bits.numel() + 7) // 8
        bits = torch.cat([bits, bits.new_zeros(8 * n - bits.numel())]).view(n, 8)
        out[packed[b]:packed[b] + n] = (bits * weights).sum(1).to(out.dtype)
    return {"output": out}


def make_inputs(dims, dtype, gen, device):
    b, k, q = dims["B"], dims["K"], dims["Q"]
    lens = _lengths(b, k, dims["E"], gen, device)
    kv = torch.zeros(b + 1, dtype=torch.int64, device=device)
    kv[1:] = torch.cumsum(lens, 0)
    packed = torch.zeros(b + 1, dtype=torch.int64, device=device)
    packed[1:] = torch.cumsum((lens * q + 7) // 8, 0)
    mask = torch.rand(b * k * q, generator=gen, device=device) < 0.5
    return {"mask": mask, "kv_indptr": kv.to(torch.int32), "packed_indptr": packed.to(torch.int32)}


def scalars(dims, dtype):
    return {"n_requests": dims["B"], "q_width": dims["Q"], "kv_len_bound": dims["K"] + dims["E"]}


REFERENCE = FileText(
    doc=(
        "Reference for pack_verify_mask_into (astra-sglang, written): byte j of request b holds bits\n"
        "8j..8j+7 of its mask block, bit i of the byte = element 8j+i (little bit order); bytes past the packed\n"
        "stream are left as they were."
    ),
    imports=("import torch",),
    functions=(reference,),
)

INPUTS = FileText(
    doc=(
        "Inputs for pack_verify_mask_into (astra-sglang, written): B requests whose KV lengths (prefix + Q draft\n"
        "tokens) lie in [1, K+E] and sum to B*K, their kv_indptr, the byte offsets packed_indptr = [0, cumsum(ceil(Q *\n"
        "kv_len / 8))] that SGLang computes on the host, and a random tree mask (each bit 1 with probability 1/2)."
    ),
    imports=("import torch",),
    functions=(_lengths, make_inputs, scalars),
)


ENTRY = CatalogEntry(
    short_name="pack_verify_mask_into",
    op_id="speculative.pack_verify_mask_into",
    entry_point=f"{_MODULE}:pack_verify_mask_into",
    kind="triton",
    signature=Signature(
        dims=[Dim(name="B", meaning="requests"), Dim(name="K", meaning="mean KV length per request"),
              Dim(name="E", meaning="how far one KV length may exceed K", min=0),
              Dim(name="Q", meaning="verify tokens per request (uniform)")],
        tensors=[
            TensorArg(name="mask", role="input", shape=["B*K*Q"], dtype="bool", align_bytes=1, generated=True),
            TensorArg(name="kv_indptr", role="input", shape=["B+1"], dtype="int32", align_bytes=4, generated=True),
            TensorArg(name="packed_indptr", role="input", shape=["B+1"], dtype="int32", align_bytes=4,
                      generated=True),
            TensorArg(name="output", role="inplace", shape=["B*K*Q//8+B"], dtype="uint8", align_bytes=1),
        ],
        scalars=[ScalarArg(name="n_requests", type="int", meaning="batch_size (= B)"),
                 ScalarArg(name="q_width", type="int", meaning="query_width (= Q)"),
                 ScalarArg(name="kv_len_bound", type="int", meaning="max_kv_len: an upper bound of every KV length")],
        dtypes=["uint8"],
        relations=["output[packed_indptr[b] + j] = sum_i mask[kv_indptr[b]*Q + 8j + i] << i over the block",
                   "bytes past packed_indptr[B] are untouched (the buffer is SGLang's preallocated one)"],
        returns=[],
    ),
    reference=REFERENCE,
    shapes=_shapes,
    call=["mask", "kv_indptr", "packed_indptr", "output", "batch_size=n_requests", "query_width=q_width",
          "max_kv_len=kv_len_bound"],
    wrapper=f"{_MODULE}:pack_verify_mask_into",
    tolerances=exact_tolerances(["uint8"]),
    callsite_modules=(_MODULE,),
    serving_sites={f"{_MODULE}:pack_verify_mask_into": "FlashInfer backend, EAGLE verify with a uniform verify "
                   "width and page_size 1 (imported inside the prefill-metadata update)"},
    inputs=INPUTS,
    inputs_scalars=True,
    notes=["Packed bits: compared exactly."],
)

