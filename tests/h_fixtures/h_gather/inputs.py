"""Slot indices like a KV-cache read: distinct rows of the table, in random order (never random integers,
which would repeat rows and, for a small table, point past its end)."""

import torch


def make_inputs(dims, dtype, gen, device):
    perm = torch.randperm(dims["S"], generator=gen, device=device)
    return {"index": perm[: dims["N"]].to(torch.int32)}
