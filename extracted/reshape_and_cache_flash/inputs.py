"""Structured inputs for reshape_and_cache_flash (astra-sglang, written): the slot mapping of a batch."""

import torch


def make_inputs(dims, dtype, gen, device):
    t, bs, x = dims["T"], dims["BS"], dims["X"]
    pool = (t // bs + x) * bs
    free = torch.randperm(pool - bs, generator=gen, device=device) + bs  # page 0 is the padded page
    slots = free[:t].to(torch.int64)
    pad = t // 4
    if pad:
        slots[t - pad:] = -1
    return {"slot_mapping": slots}
