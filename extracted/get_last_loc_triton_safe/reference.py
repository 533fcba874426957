"""Reference for get_last_loc_triton_safe (astra-sglang, written; restates SGLang's get_last_loc_torch):
last_loc[i] = req_to_token[req_pool_indices[i], prefix_lens[i] - 1], or -1 where prefix_lens[i] == 0."""

import torch


def reference(**args):
    table = args["req_to_token"].long()
    req = args["req_pool_indices"].long()
    prefix = args["prefix_lens"]
    p = prefix.long()
    picked = table[req, (p - 1).clamp(min=0)]
    last = torch.where(p > 0, picked, torch.full_like(picked, -1))
    return {"last_loc": last.to(prefix.dtype)}
