"""Reference for pair_to_row_map (astra-sglang, written): the flat pair index of every routed pair."""

import torch


def reference(**args):
    ids = args["topk_ids"].reshape(-1)
    p = torch.arange(ids.numel(), device=ids.device, dtype=torch.int32)
    return {"out": torch.where(ids >= 0, p, torch.full_like(p, -1))}
