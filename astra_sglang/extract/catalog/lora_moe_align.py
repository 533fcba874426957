"""LoRA-MoE routing helpers (Triton ``lora/moe/align_rows.py``): pair-to-row maps and one-token alignment.

The LoRA MoE path drops pairs routed to a negative expert id (experts outside this rank or masked padding):
pair_to_row_map marks every (token, k) pair with its flat index or -1; moe_align_single_token is the decode
fast path of moe_align_block_size for one token with distinct top-k ids (topk <= 32): one block per valid
expert, sorted by expert id.
"""

from __future__ import annotations

from astra_sglang.contract.op import Dim, ScalarArg, ShapeCase, Signature, TensorArg
from astra_sglang.extract.catalog.base import CatalogEntry, exact_tolerances
from astra_sglang.extract.shapes import DECODE_T, case, dedup

_MODULE = "sglang.kernels.ops.lora.moe.align_rows"
_MOE = {"Mixtral-8x7B": (8, 2), "Qwen3-30B-A3B": (128, 8), "DeepSeek-V3": (256, 8)}

_TOPK_INPUTS = '''"""Inputs for {name} (astra-sglang, written): top-k routing of {rows} over E = {experts} experts (the
distinct ids a reference top-k of random router logits gives), with about one id in five replaced by -1
(a pair this rank does not serve)."""

import torch


def make_inputs(dims, dtype, gen, device):
    e = {experts}
    logits = torch.randn({rows_shape}, e, generator=gen, device=device)
    ids = logits.topk(dims["K"], dim=-1).indices
    dropped = torch.rand(ids.shape, generator=gen, device=device) < 0.2
    return {{"topk_ids": torch.where(dropped, torch.full_like(ids, -1), ids).to(torch.int32)}}
'''


def _pair_shapes() -> list[ShapeCase]:
    cases = [case(["decode" if t <= 256 else "prefill"], f"{name} top-{k}, {t} tokens", T=t, K=k)
             for i, (name, (_, k)) in enumerate(_MOE.items()) for t in (*DECODE_T[i % 2::2], 4096 * (i + 1))]
    cases += [case(["edge", "decode"], "edge: one token", T=1, K=8),
              case(["edge"], "edge: more than one 1024-pair block with a tail", T=300, K=6)]
    return dedup(cases)


PAIR_TO_ROW_MAP = CatalogEntry(
    short_name="pair_to_row_map",
    op_id="lora.pair_to_row_map",
    entry_point=f"{_MODULE}:pair_to_row_map",
    kind="triton",
    signature=Signature(
        dims=[Dim(name="T", meaning="tokens"), Dim(name="K", meaning="top-k", max=32)],
        tensors=[
            TensorArg(name="topk_ids", role="input", shape=["T", "K"], dtype="int32", align_bytes=4, generated=True),
            TensorArg(name="out", role="output", shape=["T*K"], dtype="int32", align_bytes=4),
        ],
        dtypes=["int32"],
        relations=["out[p] = p if topk_ids.flatten()[p] >= 0 else -1"],
        returns=["out"],
    ),
    reference='''"""Reference for pair_to_row_map (astra-sglang, written): the flat pair index of every routed pair."""

import torch


def reference(**args):
    ids = args["topk_ids"].reshape(-1)
    p = torch.arange(ids.numel(), device=ids.device, dtype=torch.int32)
    return {"out": torch.where(ids >= 0, p, torch.full_like(p, -1))}
''',
    shapes=_pair_shapes,
    call=["topk_ids", "out"],
    wrapper=f"{_MODULE}:pair_to_row_map",
    tolerances=exact_tolerances(["int32"]),
    callsite_modules=(_MODULE,),
    serving_sites={f"{_MODULE}:pair_to_row_map": "LoRA MoE runner: the pair -> row map its finalize gates on"},
    inputs=_TOPK_INPUTS.format(name="pair_to_row_map", rows="T tokens", experts="max(64, 2 * dims[\"K\"])",
                               rows_shape="dims[\"T\"]"),
    notes=["Indices: compared exactly."],
)

_ALIGN_REFERENCE = '''"""Reference for moe_align_single_token (astra-sglang, written): the valid (>= 0) top-k ids of the one
token sorted ascending, one block of block_size rows each; row r*block_size of block r holds the token's
pair index, every other row the padding value topk; expert ids past the valid ones are -1."""

import torch


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
'''

MOE_ALIGN_SINGLE_TOKEN = CatalogEntry(
    short_name="moe_align_single_token",
    op_id="lora.moe_align_single_token",
    entry_point=f"{_MODULE}:moe_align_single_token",
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
    reference=_ALIGN_REFERENCE,
    shapes=lambda: dedup([case(["decode"], f"{name} top-{k}, one decode token, BLOCK_M {bs}", K=k, BS=bs)
                          for name, (_, k) in _MOE.items() for bs in (16, 32, 64)]
                         + [case(["edge"], "edge: top-1", K=1, BS=16),
                            case(["edge"], "edge: the largest top-k (32)", K=32, BS=64),
                            case(["edge"], "edge: top-k not a power of two", K=6, BS=16)]),
    call=["topk_ids", "block_size", "pair_to_row"],
    wrapper=f"{_MODULE}:moe_align_single_token",
    tolerances=exact_tolerances(["int32"]),
    callsite_modules=(_MODULE,),
    serving_sites={f"{_MODULE}:moe_align_single_token": "LoRA MoE alignment, one-token decode fast path"},
    inputs=_TOPK_INPUTS.format(name="moe_align_single_token", rows="one token", experts="max(64, 2 * dims[\"K\"])",
                               rows_shape="1") + '''

def scalars(dims, dtype):
    return {"block_size": dims["BS"]}
''',
    inputs_scalars=True,
    notes=["Indices: compared exactly.", "pair_to_row is passed (WRITE_PAIR_TO_ROW=True), the serving path "
           "of the LoRA MoE runner."],
)

ENTRIES = [PAIR_TO_ROW_MAP, MOE_ALIGN_SINGLE_TOKEN]
