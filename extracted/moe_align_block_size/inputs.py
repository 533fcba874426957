"""Inputs for moe_align_block_size (astra-sglang, written): top-k expert ids from a reference routing.

Router logits are normal with a per-expert bias (some experts hot, some without a token, as in real batches);
each token takes the top-K experts of softmax(logits) over the E*EP global experts. With expert parallelism
this rank (drawn) keeps its E local experts and every other id becomes -1, SGLang's EP convention (bucket 0 of
the +1 offset). Where K exceeds the global expert count (only in invented shapes) the surplus slots are -1.
"""

import torch


def make_inputs(dims, dtype, gen, device):
    t, k, e, ep = dims["T"], dims["K"], dims["E"], dims["EP"]
    g = e * ep
    bias = 2.0 * torch.randn(1, g, generator=gen, device=device)
    logits = torch.randn(t, g, generator=gen, device=device) + bias
    picked = min(k, g)
    ids = torch.topk(torch.softmax(logits, dim=-1), picked, dim=-1).indices
    rank = int(torch.randint(0, ep, (1,), generator=gen, device=device).item())
    local = ids - rank * e
    local = torch.where((local >= 0) & (local < e), local, torch.full_like(local, -1))
    if picked < k:
        local = torch.cat([local, torch.full((t, k - picked), -1, dtype=local.dtype, device=device)], dim=1)
    return {"topk_ids": local.to(getattr(torch, dtype)).contiguous()}


def scalars(dims, dtype):
    return {"num_experts": dims["E"] + 1, "block_size": dims["BS"]}
