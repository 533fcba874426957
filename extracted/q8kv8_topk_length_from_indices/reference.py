"""Reference for q8kv8_topk_length_from_indices (astra-sglang, written; the unfused derivation
the kernel replaces: amax((indices >= 0) * ramp) with ramp = 1..K, clamped to 1)."""

import torch


def reference(**args):
    idx = args["indices"]
    ramp = torch.arange(1, idx.shape[1] + 1, device=idx.device, dtype=torch.int32)
    return {"length": ((idx >= 0).to(torch.int32) * ramp).amax(dim=1).clamp(min=1)}
