"""Inputs for fused_moe_down (astra-sglang, written): a reference routing, then moe_align.

Router logits are normal with a mild per-expert bias (hotter and idler experts, as a trained router spreads a
batch: most experts touched once the batch is large, as in SGLang's forward); each token
takes the top-TK experts of softmax(logits) with renormalized weights (float32). sorted_token_ids /
expert_ids / num_tokens_post_padded are what moe_align_block_size gives for BLOCK_SIZE_M = BM: per expert, its
flat (token, slot) indices ascending, padded with the sentinel T*TK to a multiple of BM; expert_ids[j] is the
expert of block j (-1 past the last block, which the kernel never reads). A, the activated intermediate, is
drawn by the harness like any input.
"""

import torch

# Spread of the per-expert router bias. A trained router spreads a batch over most experts (load balancing), and
# SGLang's forward with dummy weights touched 111 of 128 at batch 32 (profile, H200, 2026-12-03). At 2.0 a batch of
# 256 tokens touched 44 of 128 experts (seeds 0-4): every timed case read 3x fewer weights than serving does, and the
# sweep and the loop were tuned to that (2026-12-06). At 0.5: 8, 61, 88, 107, 119, 124 of 128 at T = 1, 16, 32,
# 64, 128, 256; a hot expert still gets several blocks, an idle one none.
ROUTER_BIAS = 0.5


def make_inputs(dims, dtype, gen, device):
    t, tk, e, bm = dims["T"], dims["TK"], dims["E"], dims["BM"]
    bias = ROUTER_BIAS * torch.randn(1, e, generator=gen, device=device)
    logits = torch.randn(t, e, generator=gen, device=device) + bias
    weights, ids = torch.topk(torch.softmax(logits, dim=-1), min(tk, e), dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    flat = ids.reshape(-1)
    numel = flat.numel()
    cap = numel + e * (bm - 1)
    counts = torch.bincount(flat, minlength=e)
    padded = (counts + bm - 1) // bm * bm
    start = torch.cumsum(padded, 0) - padded
    order = torch.argsort(flat, stable=True)
    rank = torch.arange(numel, device=device) - (torch.cumsum(counts, 0) - counts)[flat[order]]
    sorted_ids = torch.full((cap,), numel, dtype=torch.int32, device=device)
    sorted_ids[start[flat[order]] + rank] = order.to(torch.int32)
    total = int(padded.sum())
    expert_ids = torch.full(((cap + bm - 1) // bm,), -1, dtype=torch.int32, device=device)
    expert_ids[: total // bm] = torch.repeat_interleave(torch.arange(e, device=device), padded // bm).to(torch.int32)
    return {"topk_weights": weights.float().contiguous(), "topk_ids": ids.to(torch.int32).contiguous(),
            "sorted_token_ids": sorted_ids, "expert_ids": expert_ids,
            "num_tokens_post_padded": torch.tensor([total], dtype=torch.int32, device=device)}


def scalars(dims, dtype):
    return {"BLOCK_SIZE_M": dims["BM"], "BLOCK_SIZE_N": dims["BN"], "BLOCK_SIZE_K": dims["BK"],
            "GROUP_SIZE_M": dims["GM"], "num_warps": dims["NW"], "num_stages": dims["NS"]}
