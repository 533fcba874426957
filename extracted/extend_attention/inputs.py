"""Structured inputs for extend_attention_fwd (astra-sglang, written): a prefill batch of mixed lengths."""

import math

import torch


def extend_lengths(b, mean):
    lens = [mean + mean // 2 if i % 2 == 0 else mean - mean // 2 for i in range(b)]
    if b % 2:
        lens[-1] = mean
    return lens


def make_inputs(dims, dtype, gen, device):
    b, l_, r, nk, g, d, x = (dims[n] for n in ("B", "L", "R", "NK", "G", "D", "X"))
    lens = torch.tensor(extend_lengths(b, l_), dtype=torch.int64, device=device)
    lens = lens[torch.randperm(b, generator=gen, device=device)]
    qo = torch.zeros(b + 1, dtype=torch.int32, device=device)
    qo[1:] = lens.cumsum(0).to(torch.int32)
    cuts = torch.randint(0, b * r + 1, (b - 1,), generator=gen, device=device).sort().values
    kv = torch.cat([torch.zeros(1, dtype=torch.int64, device=device), cuts,
                    torch.full((1,), b * r, dtype=torch.int64, device=device)]).to(torch.int32)
    pool = b * r + x
    indices = (torch.randperm(pool - 1, generator=gen, device=device) + 1)[: b * r].to(torch.int64)
    dt = getattr(torch, dtype)
    return {"q_extend": torch.randn((b * l_, nk * g, d), generator=gen, device=device).to(dt),
            "k_extend": torch.randn((b * l_, nk, d), generator=gen, device=device).to(dt),
            "k_buffer": torch.randn((pool, nk, d), generator=gen, device=device).to(dt),
            "qo_indptr": qo, "kv_indptr": kv, "kv_indices": indices}


def scalars(dims, dtype):
    return {"sm_scale": 1.0 / math.sqrt(dims["D"]), "max_len_extend": max(extend_lengths(dims["B"], dims["L"]))}
