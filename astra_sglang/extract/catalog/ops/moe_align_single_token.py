"""moe_align_single_token: the decode fast path of moe_align_block_size for one token with distinct
top-k ids (Triton ``lora/moe/align_rows.py``): one block per valid expert, sorted by expert id.
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import Dim, ScalarArg, Signature, TensorArg
from astra_sglang.extract.catalog._lora_moe_align import MODULE, MOE
from astra_sglang.extract.catalog.base import CatalogEntry, exact_tolerances
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import case, dedup


def reference(**args):
    ids = args["topk_ids"].reshape(-1).long()
    topk, bs = ids.numel(), args["block_size"]
    lanes = torch.arange(topk, device=ids.device)
    valid = ids >= 0
    order = torch.argsort(ids[valid], stable=True)
    sorted_ids = torch.full((topk * bs,), topk, dtype=torch.int32, device=ids.device)
    expert_ids = torch.full((topk,), -1, dtype=torch.int32, device=ids.device)
    n = int(valid.sum())
    sorted_ids[torch.arange(n, device=ids.device) * bs] = lanes[valid][order].to(torch.int32)
    expert_ids[:n] = ids[valid][order].to(torch.int32)
    num_post = torch.tensor([n * bs], dtype=torch.int32, device=ids.device)
    pair_to_row = torch.where(valid, lanes, torch.full_like(lanes, -1)).to(torch.int32)
    return {"sorted_ids": sorted_ids, "expert_ids": expert_ids, "num_post": num_post, "pair_to_row": pair_to_row}


def make_inputs(dims, dtype, gen, device):
    e = max(64, 2 * dims["K"])
    logits = torch.randn(1, e, generator=gen, device=device)
    ids = logits.topk(dims["K"], dim=-1).indices
    dropped = torch.rand(ids.shape, generator=gen, device=device) < 0.2
    return {"topk_ids": torch.where(dropped, torch.full_like(ids, -1), ids).to(torch.int32)}


def scalars(dims, dtype):
    return {"block_size": dims["BS"]}


REFERENCE = FileText(
    doc=(
        "Reference for moe_align_single_token (astra-sglang, written): the valid (>= 0) top-k ids of the one\n"
        "token sorted ascending, one block of block_size rows each; row r*block_size of block r holds the token's\n"
        "pair index, every other row the padding value topk; expert ids past the valid ones are -1."
    ),
    imports=("import torch",),
    functions=(reference,),
)

INPUTS = FileText(
    doc=(
        "Inputs for moe_align_single_token (astra-sglang, written): top-k routing of one token over E = max(64, 2 * "
        'dims["K"]) experts (the\n'
        "distinct ids a reference top-k of random router logits gives), with about one id in five replaced by -1\n"
        "(a pair this rank does not serve)."
    ),
    imports=("import torch",),
    functions=(make_inputs, scalars),
)


ENTRY = CatalogEntry(
    short_name="moe_align_single_token",
    op_id="lora.moe_align_single_token",
    entry_point=f"{MODULE}:moe_align_single_token",
    kind="triton",
    signature=Signature(
        dims=[Dim(name="K", meaning="top-k", max=32), Dim(name="BS", meaning="block_size (the MoE GEMM's BLOCK_M)")],
        tensors=[
            TensorArg(name="topk_ids", role="input", shape=["1", "K"], dtype="int32", align_bytes=4, generated=True),
            TensorArg(name="pair_to_row", role="output", shape=["K"], dtype="int32", align_bytes=4),
            TensorArg(name="sorted_ids", role="output", shape=["K*BS"], dtype="int32", align_bytes=4),
            TensorArg(name="expert_ids", role="output", shape=["K"], dtype="int32", align_bytes=4),
            TensorArg(name="num_post", role="output", shape=["1"], dtype="int32", align_bytes=4),
        ],
        scalars=[ScalarArg(name="block_size", type="int", meaning="= BS")],
        dtypes=["int32"],
        relations=["distinct top-k ids, -1 = dropped; sorted ascending into one block each",
                   "num_post = (#valid) * block_size; pair_to_row[k] = k if valid else -1"],
        returns=["sorted_ids", "expert_ids", "num_post"],
    ),
    reference=REFERENCE,
    shapes=lambda: dedup([case(["decode"], f"{name} top-{k}, one decode token, BLOCK_M {bs}", K=k, BS=bs)
                          for name, (_, k) in MOE.items() for bs in (16, 32, 64)]
                         + [case(["edge"], "edge: top-1", K=1, BS=16),
                            case(["edge"], "edge: the largest top-k (32)", K=32, BS=64),
                            case(["edge"], "edge: top-k not a power of two", K=6, BS=16)]),
    call=["topk_ids", "block_size", "pair_to_row"],
    wrapper=f"{MODULE}:moe_align_single_token",
    tolerances=exact_tolerances(["int32"]),
    callsite_modules=(MODULE,),
    serving_sites={f"{MODULE}:moe_align_single_token": "LoRA MoE alignment, one-token decode fast path"},
    inputs=INPUTS,
    inputs_scalars=True,
    notes=["Indices: compared exactly.", "pair_to_row is passed (WRITE_PAIR_TO_ROW=True), the serving path "
           "of the LoRA MoE runner."],
)
