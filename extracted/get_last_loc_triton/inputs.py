"""Inputs for get_last_loc (astra-sglang, written): a request pool whose rows hold the KV slots of their
tokens (a random permutation of the pool's slots), a batch of distinct pool rows, and prefix lengths in
[0, C] with about one request in five new (prefix 0 -> last loc -1)."""

import torch


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
