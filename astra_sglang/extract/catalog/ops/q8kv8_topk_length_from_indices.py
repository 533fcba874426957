"""Valid top-k length per query row for DeepSeek sparse attention (Triton ``attention/metadata.py``
q8kv8_topk_length_from_indices): last non-negative slot + 1, at least 1.

The DSA backend's q8kv8 decode path (``srt/layers/attention/dsa_backend.py``) passes it to the sparse MLA
kernel so rows shorter than index_topk stop early; the indexer's top-k pads missing slots with -1.
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import Dim, ShapeCase, Signature, TensorArg
from astra_sglang.extract.catalog.base import CatalogEntry, exact_tolerances
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import DECODE_T, case, dedup

_MODULE = "sglang.kernels.ops.attention.metadata"


def _shapes() -> list[ShapeCase]:
    # DeepSeek-V3.2: index_topk 2048
    cases = [case(["decode"], f"DeepSeek-V3.2 DSA decode, {t} query rows", S=t, K=2048) for t in DECODE_T]
    cases += [case(["prefill"], "DeepSeek-V3.2 DSA, a 2048-token extend", S=2048, K=2048),
              case(["edge"], "edge: top-k of 256 (256-wide scan blocks)", S=9, K=256),
              case(["edge"], "edge: top-k of 128 (the smallest block)", S=5, K=384)]
    return dedup(cases)


def reference(**args):
    idx = args["indices"]
    ramp = torch.arange(1, idx.shape[1] + 1, device=idx.device, dtype=torch.int32)
    return {"length": ((idx >= 0).to(torch.int32) * ramp).amax(dim=1).clamp(min=1)}


def make_inputs(dims, dtype, gen, device):
    s, k = dims["S"], dims["K"]
    count = torch.randint(0, k + 1, (s,), generator=gen, device=device)
    kind = torch.rand(s, generator=gen, device=device)
    count = torch.where(kind < 0.33, torch.full_like(count, k), count)
    count = torch.where(kind > 0.9, torch.zeros_like(count), count)
    slots = torch.randint(0, 1 << 20, (s, k), generator=gen, device=device)
    pos = torch.arange(k, device=device)
    return {"indices": torch.where(pos[None, :] < count[:, None], slots, torch.full_like(slots, -1))
            .to(torch.int32)}


REFERENCE = FileText(
    doc=(
        "Reference for q8kv8_topk_length_from_indices (astra-sglang, written; the unfused derivation\n"
        "the kernel replaces: amax((indices >= 0) * ramp) with ramp = 1..K, clamped to 1)."
    ),
    imports=("import torch",),
    functions=(reference,),
)

INPUTS = FileText(
    doc=(
        "Inputs for q8kv8_topk_length_from_indices (astra-sglang, written): the indexer's top-k page table\n"
        "of S query rows: row s holds c_s valid KV slots (random slots of a 1M-token pool) then -1 padding; about a\n"
        "third of the rows are full (long context), a few empty (all padding), the rest cut anywhere."
    ),
    imports=("import torch",),
    functions=(make_inputs,),
)


ENTRY = CatalogEntry(
    short_name="q8kv8_topk_length_from_indices",
    op_id="attention.q8kv8_topk_length_from_indices",
    entry_point=f"{_MODULE}:q8kv8_topk_length_from_indices",
    kind="triton",
    signature=Signature(
        dims=[Dim(name="S", meaning="query rows"),
              Dim(name="K", meaning="index_topk (a multiple of the 128-wide scan block)", multiple_of=128)],
        tensors=[
            TensorArg(name="indices", role="input", shape=["S", "K"], dtype="int32", align_bytes=4, generated=True),
            TensorArg(name="length", role="output", shape=["S"], dtype="int32", align_bytes=4),
        ],
        dtypes=["int32"],
        relations=["length[s] = max(1, 1 + last k with indices[s, k] >= 0)"],
        returns=["length"],
    ),
    reference=REFERENCE,
    shapes=_shapes,
    call=["indices"],
    wrapper=f"{_MODULE}:q8kv8_topk_length_from_indices",
    tolerances=exact_tolerances(["int32"]),
    callsite_modules=(_MODULE,),
    serving_sites={"sglang.srt.layers.attention.dsa_backend:q8kv8_topk_length_from_indices": "DSA backend, "
                   "q8kv8 sparse decode (read from source: the backend imports only on CUDA)"},
    inputs=INPUTS,
    notes=["Lengths: compared exactly."],
)

