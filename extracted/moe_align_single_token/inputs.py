"""Inputs for moe_align_single_token (astra-sglang, written): top-k routing of one token over E = max(64, 2 * dims["K"]) experts (the
distinct ids a reference top-k of random router logits gives), with about one id in five replaced by -1
(a pair this rank does not serve)."""

import torch


def make_inputs(dims, dtype, gen, device):
    e = max(64, 2 * dims["K"])
    logits = torch.randn(1, e, generator=gen, device=device)
    ids = logits.topk(dims["K"], dim=-1).indices
    dropped = torch.rand(ids.shape, generator=gen, device=device) < 0.2
    return {"topk_ids": torch.where(dropped, torch.full_like(ids, -1), ids).to(torch.int32)}


def scalars(dims, dtype):
    return {"block_size": dims["BS"]}
