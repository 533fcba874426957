"""Structured inputs for decode_attention_fwd (astra-sglang, written): a decode batch over a paged KV pool."""

import math

import torch

MAX_KV_SPLITS = 8
SMS = 132


def kv_lengths(b, total, gen, device):
    """b lengths >= 1 adding up to total, in random order. Which lengths is fixed by (b, total): the expected
    sorted pieces of [0, total) cut at b - 1 uniform random points (the k-th smallest of b is total / b *
    (1/b + 1/(b-1) + ... + 1/(b-k+1))), rounded. Drawn cuts made a mixed shape's cost a draw of its own (the
    longest request sets the kernel's time): one kernel evaluated twice at B8 S32768 took 963 and 1197 us
    (H100, 2026-12-05). The order and the pages stay fresh for every input set."""
    lens, tail = [], 0.0
    for j in range(b, 0, -1):
        tail += 1.0 / j
        lens.append(max(1, round(total / b * tail)))
    i = b - 1
    while sum(lens) != total:  # rounding: the longest give or take one token each, in turn
        step = 1 if sum(lens) < total else -1
        if lens[i] + step >= 1:
            lens[i] += step
        i = (i - 1) % b
    order = torch.randperm(b, generator=gen, device=device)
    return torch.tensor(lens, dtype=torch.int64, device=device)[order]


def num_kv_splits(lens, num_head, num_kv_head, max_splits=MAX_KV_SPLITS, sms=SMS):
    """torch restatement of get_num_kv_splits_triton (kernels/ops/attention/metadata.py) as
    TritonAttnBackend.get_num_kv_splits launches it for a decode batch: num_group = 1, MAX_NUM_SEQ =
    max(256, next_power_of_2(batch)) lanes (every request is loaded), device_core_count = the SMs. The
    log2 and the core count are float32 like the kernel's, truncated to int32 as tl.cast does."""
    mx, mn = int(lens.max()), int(lens.min())
    if mx * 8 < mn * 10:
        mn = mx
    splits_1 = min(-(-mx // mn), max_splits)
    chunk_1 = -(-mx // splits_1)
    ext = torch.tensor(mx, dtype=torch.float32) / 64.0
    cores = int((sms * torch.clamp(torch.log2(ext), min=1.0)).to(torch.int32))
    group = num_head // num_kv_head
    grid = len(lens) * num_head if group == 1 else len(lens) * -(-num_head // min(16, group))
    splits_2 = min(-(-cores // grid), max_splits)
    chunk_2 = -(-mx // splits_2)
    return torch.maximum(-(-lens // chunk_1), -(-lens // chunk_2)).to(torch.int32)


def paged_indices(lens, page, pool, gen, device):
    """Token slots of every request, request after request: request b's tokens fill ceil(len_b / page) whole
    pages (slots page_id * page .. + page - 1 in order, the last page partly), its pages drawn at random among
    pages 1 .. pool // page - 1 (page 0 is SGLang's padding page); page 1 gives single random slots."""
    pages_per = -(-lens // page)
    avail = pool // page - 1
    pages = torch.randperm(avail, generator=gen, device=device)[: int(pages_per.sum())] + 1
    first_page = torch.cumsum(pages_per, 0) - pages_per  # request b's first page in `pages`
    start = torch.cumsum(lens, 0) - lens
    pos = torch.arange(int(lens.sum()), device=device) - torch.repeat_interleave(start, lens)
    page_of = torch.repeat_interleave(first_page, lens) + pos // page
    return (pages[page_of] * page + pos % page).to(torch.int64)


def make_inputs(dims, dtype, gen, device):
    b, s, nk, g, d, p, x = (dims[n] for n in ("B", "S", "NK", "G", "D", "P", "X"))
    if dims.get("R", 2) == 2 and b > 1:  # without R (dims written before it): mixed, as they were
        lens = kv_lengths(b, b * s, gen, device)
    else:
        lens = torch.full((b,), s, dtype=torch.int64, device=device)
    indptr = torch.zeros(b + 1, dtype=torch.int32, device=device)
    indptr[1:] = lens.cumsum(0).to(torch.int32)
    pool = b * s + (b + 1) * (p - 1) + x
    indices = paged_indices(lens, p, pool, gen, device)
    kx = dims.get("KX", 0)
    if kx:  # the CUDA-graph form: the whole pre-sized buffer, past the batch's slots stale ones of earlier batches
        stale = torch.randint(0, pool, (kx,), generator=gen, device=device, dtype=torch.int64)
        indices = torch.cat([indices, stale])
    dt = getattr(torch, dtype)
    q = torch.randn((b, nk * g, d), generator=gen, device=device).to(dt)
    k = torch.randn((pool, nk, d), generator=gen, device=device).to(dt)
    return {"q": q, "k_buffer": k, "kv_indptr": indptr, "kv_indices": indices,
            "num_kv_splits": num_kv_splits(lens, nk * g, nk, dims.get("MS", MAX_KV_SPLITS))}


def scalars(dims, dtype):
    return {"sm_scale": 1.0 / math.sqrt(dims["D"]), "max_kv_splits": dims["MS"], "page_size": dims["P"]}
