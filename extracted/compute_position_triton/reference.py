"""Reference for compute_position_triton (astra-sglang, written; restates SGLang's
compute_position_torch)."""

import torch


def reference(**args):
    prefix, lens = args["extend_prefix_lens"].long(), args["extend_seq_lens"].long()
    positions = torch.cat([torch.arange(int(p), int(p) + int(n), device=lens.device) for p, n in zip(prefix, lens)])
    start = torch.zeros_like(lens)
    start[1:] = torch.cumsum(lens[:-1], 0)
    return {"positions": positions, "extend_start_loc": start.to(torch.int32)}
