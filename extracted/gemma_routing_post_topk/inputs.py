"""Inputs for gemma_routing_post_topk (astra-sglang, written): the top-k expert ids of random
router logits over E = K + X experts (distinct per token, int64 as torch.topk returns them)."""

import torch


def make_inputs(dims, dtype, gen, device):
    logits = torch.randn(dims["T"], dims["K"] + dims["X"], generator=gen, device=device)
    return {"topk_ids": logits.topk(dims["K"], dim=-1).indices}
