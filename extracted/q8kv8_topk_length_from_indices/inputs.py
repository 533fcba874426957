"""Inputs for q8kv8_topk_length_from_indices (astra-sglang, written): the indexer's top-k page table
of S query rows: row s holds c_s valid KV slots (random slots of a 1M-token pool) then -1 padding; about a
third of the rows are full (long context), a few empty (all padding), the rest cut anywhere."""

import torch


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
