"""Reference for moe_align_single_token (astra-sglang, written): the valid (>= 0) top-k ids of the one
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
