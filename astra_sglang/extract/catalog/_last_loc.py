"""The last KV slot of each request's prefix (Triton ``memory/common.py``): ``req_to_token[req, prefix_len - 1]``.

SGLang's paged allocator asks for it before every extend (``mem_cache/allocation.py:get_last_loc``) to know
where a request's last page ends; a request without a prefix gets -1. Two kernels (get_last_loc_triton and
get_last_loc_triton_safe) share the signature, the shapes and the inputs; only their reference's docstring
names them apart, so the reference function is shared too.
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import Dim, ShapeCase, Signature, TensorArg
from astra_sglang.extract.catalog.base import CatalogEntry, exact_tolerances
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import DECODE_T, PREFILL_T, case, dedup

MODULE = "sglang.kernels.ops.memory.common"
SERVING = "sglang.srt.mem_cache.allocation"


def make_inputs(dims, dtype, gen, device):
    b, r, c = dims["B"], dims["R"], dims["C"]
    rows = b + r
    slots = torch.randperm(rows * c, generator=gen, device=device).to(torch.int32).view(rows, c)
    req_pool_indices = torch.randperm(rows, generator=gen, device=device)[:b].to(torch.int64)
    prefix = torch.randint(1, c + 1, (b,), generator=gen, device=device)
    new = torch.rand(b, generator=gen, device=device) < 0.2
    prefix = torch.where(new, torch.zeros_like(prefix), prefix)
    return {"req_to_token": slots, "req_pool_indices": req_pool_indices,
            "prefix_lens": prefix.to(getattr(torch, dtype))}


def reference(**args):
    table = args["req_to_token"].long()
    req = args["req_pool_indices"].long()
    prefix = args["prefix_lens"]
    p = prefix.long()
    picked = table[req, (p - 1).clamp(min=0)]
    last = torch.where(p > 0, picked, torch.full_like(picked, -1))
    return {"last_loc": last.to(prefix.dtype)}


INPUTS = FileText(
    doc=(
        "Inputs for get_last_loc (astra-sglang, written): a request pool whose rows hold the KV slots of their\n"
        "tokens (a random permutation of the pool's slots), a batch of distinct pool rows, and prefix lengths in\n"
        "[0, C] with about one request in five new (prefix 0 -> last loc -1)."
    ),
    imports=("import torch",),
    functions=(make_inputs,),
)


def _shapes() -> list[ShapeCase]:
    # B requests of a batch; R spare pool rows (SGLang's pool has max_running_requests rows); C the
    # context length of the pool (the model's max context).
    cases = []
    for t in DECODE_T:
        cases.append(case(["decode"], f"decode batch of {t} in a 4096-context pool", B=t, R=64, C=4096))
    for t in PREFILL_T[:3]:
        cases.append(case(["prefill"], f"extend batch of {t // 64} requests, 8192 context", B=t // 64, R=32,
                          C=8192))
    cases += [
        case(["edge", "decode"], "edge: one request", B=1, R=0, C=16),
        case(["edge"], "edge: more than one 256-wide block of requests", B=300, R=10, C=2048),
        case(["edge"], "edge: long context (LLaMA-3 128k)", B=16, R=8, C=131072),
    ]
    return dedup(cases)


def _signature(relations: list[str]) -> Signature:
    return Signature(
        dims=[Dim(name="B", meaning="requests in the batch"),
              Dim(name="R", meaning="request-pool rows not in the batch", min=0),
              Dim(name="C", meaning="max context length (row width of req_to_token)")],
        tensors=[
            TensorArg(name="req_to_token", role="input", shape=["B+R", "C"], dtype="int32", align_bytes=4,
                      generated=True),
            TensorArg(name="req_pool_indices", role="input", shape=["B"], dtype="int64", align_bytes=8,
                      generated=True),
            TensorArg(name="prefix_lens", role="input", shape=["B"], dtype="{dtype}", align_bytes=4,
                      generated=True),
            TensorArg(name="last_loc", role="output", shape=["B"], dtype="{dtype}", align_bytes=4),
        ],
        dtypes=["int64", "int32"],
        relations=relations,
        returns=["last_loc"],
    )


def last_loc_entry(name: str, note: str, reference: FileText) -> CatalogEntry:
    """The entry of ``name``; the two kernels differ in their reference's docstring and serving note."""
    return CatalogEntry(
        short_name=name,
        op_id=f"memory.{name}",
        entry_point=f"{MODULE}:{name}",
        kind="triton",
        signature=_signature([
            "last_loc[i] = req_to_token[req_pool_indices[i], prefix_lens[i] - 1] if prefix_lens[i] > 0 else -1",
            "0 <= prefix_lens[i] <= C; req_pool_indices distinct rows of req_to_token",
            "last_loc has the dtype of prefix_lens (int64 in SGLang's scheduler)",
        ]),
        reference=reference,
        shapes=_shapes,
        call=["req_to_token", "req_pool_indices", "prefix_lens"],
        wrapper=f"{MODULE}:{name}",
        tolerances=exact_tolerances(["int64", "int32"]),
        forward_native=f"{SERVING}:get_last_loc_torch",
        callsite_modules=(MODULE, SERVING),
        serving_sites={f"{SERVING}:{name}": note},
        inputs=INPUTS,
        notes=["Integer outputs: compared exactly."],
    )
