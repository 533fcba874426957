"""Structured inputs for decode_attention_fwd (astra-sglang, written): a decode batch of mixed lengths."""

import math

import torch

MAX_KV_SPLITS = 8
SMS = 132


def kv_lengths(b, total, gen, device):
    cuts = (torch.randperm(total - 1, generator=gen, device=device)[: b - 1] + 1).sort().values
    edges = torch.cat([torch.zeros(1, dtype=torch.int64, device=device), cuts.to(torch.int64),
                       torch.full((1,), total, dtype=torch.int64, device=device)])
    return edges[1:] - edges[:-1]


def num_kv_splits(lens, num_head, num_kv_head, max_splits=MAX_KV_SPLITS, sms=SMS):
    """torch restatement of get_num_kv_splits_triton (kernels/ops/attention/metadata.py), num_group = 1."""
    mx, mn = int(lens.max()), int(lens.min())
    if mx * 8 < mn * 10:
        mn = mx
    splits_1 = min(-(-mx // mn), max_splits)
    chunk_1 = -(-mx // splits_1)
    cores = int(sms * max(math.log2(mx / 64.0) if mx > 0 else 0.0, 1.0))
    group = num_head // num_kv_head
    grid = len(lens) * num_head if group == 1 else len(lens) * -(-num_head // min(16, group))
    splits_2 = min(-(-cores // grid), max_splits)
    chunk_2 = -(-mx // splits_2)
    return torch.maximum(-(-lens // chunk_1), -(-lens // chunk_2)).to(torch.int32)


def make_inputs(dims, dtype, gen, device):
    b, s, nk, g, d, x = dims["B"], dims["S"], dims["NK"], dims["G"], dims["D"], dims["X"]
    lens = kv_lengths(b, b * s, gen, device) if b > 1 else torch.full((1,), s, dtype=torch.int64, device=device)
    indptr = torch.zeros(b + 1, dtype=torch.int32, device=device)
    indptr[1:] = lens.cumsum(0).to(torch.int32)
    pool = b * s + x
    indices = (torch.randperm(pool - 1, generator=gen, device=device) + 1)[: b * s].to(torch.int64)
    dt = getattr(torch, dtype)
    q = torch.randn((b, nk * g, d), generator=gen, device=device).to(dt)
    k = torch.randn((pool, nk, d), generator=gen, device=device).to(dt)
    return {"q": q, "k_buffer": k, "kv_indptr": indptr, "kv_indices": indices,
            "num_kv_splits": num_kv_splits(lens, nk * g, nk)}


def scalars(dims, dtype):
    return {"sm_scale": 1.0 / math.sqrt(dims["D"]), "max_kv_splits": dims["MS"]}
