"""Inputs for gather_spec_extras (astra-sglang, written): the batch's request slots, distinct rows
of the pool when the pool is large enough (a random permutation), else drawn with repeats."""

import torch


def make_inputs(dims, dtype, gen, device):
    m, p = dims["M"], dims["P"]
    if m <= p:
        idx = torch.randperm(p, generator=gen, device=device)[:m]
    else:
        idx = torch.randint(0, p, (m,), generator=gen, device=device)
    return {"indices": idx.to(torch.int64)}
