"""Inputs for shuffle_rows_with_scales (astra-sglang, written): the expert-order expansion map of a
top-k routing: every token appears K times (once per routed expert), in an order given by sorting the
(token, k) pairs by a random expert id, as cutlass_moe's a_map."""

import torch


def make_inputs(dims, dtype, gen, device):
    t, k = dims["T"], dims["K"]
    experts = torch.randint(0, 256, (t * k,), generator=gen, device=device)
    order = torch.argsort(experts * (t * k) + torch.arange(t * k, device=device))
    return {"dst2src_map": (order // k).to(torch.int32)}


def scalars(dims, dtype):
    return {"num_dst_rows": dims["T"] * dims["K"]}
