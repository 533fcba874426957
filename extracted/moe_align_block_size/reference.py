"""Reference for moe_align_block_size (astra-sglang, written; the GGUF variant: pad_expert_ids, padded ids).

Bucket b = id + 1 (bucket 0 = expert -1). Each bucket's (token, slot) indices i (into topk_ids.flatten()) fill
a run of ceil(count_b / BS) * BS slots starting at the padded prefix sum; the rest of the run and everything past
the total is numel. expert_ids[j] = bucket - 1 of block j, -1 past the last block. The kernel writes a bucket's
indices with atomics, so their order within the bucket is not defined: 'sorted_token_ids:segments' gives every
slot its bucket and the checker compares each bucket as a sorted multiset (this reference writes them
ascending). cumsum_buffer is the kernel's scratch (the single-CTA path does not touch it): segments -1, never
compared."""

import torch


def reference(**args):
    ids = args["topk_ids"].reshape(-1).long()
    dev = ids.device
    buckets, bs = int(args["num_experts"]), int(args["block_size"])
    numel = ids.numel()
    cap, nblk = args["sorted_token_ids"].numel(), args["expert_ids"].numel()
    b = ids + 1
    counts = torch.bincount(b, minlength=buckets)
    padded = (counts + bs - 1) // bs * bs
    start = torch.cumsum(padded, 0) - padded
    total = int(padded.sum())
    order = torch.argsort(b, stable=True)
    first = torch.cumsum(counts, 0) - counts
    bo = b[order]
    rank = torch.arange(numel, device=dev) - first[bo]
    sorted_ids = torch.full((cap,), numel, dtype=torch.int32, device=dev)
    sorted_ids[start[bo] + rank] = order.to(torch.int32)
    expert_ids = torch.full((nblk,), -1, dtype=torch.int32, device=dev)
    owners = torch.arange(buckets, device=dev)
    expert_ids[: total // bs] = torch.repeat_interleave(owners - 1, padded // bs).to(torch.int32)
    segments = torch.full((cap,), buckets, dtype=torch.int64, device=dev)
    segments[:total] = torch.repeat_interleave(owners, padded)
    scratch = args["cumsum_buffer"]
    return {"sorted_token_ids": sorted_ids, "expert_ids": expert_ids,
            "num_tokens_post_pad": torch.tensor([total], dtype=torch.int32, device=dev),
            "cumsum_buffer": torch.zeros_like(scratch),
            "sorted_token_ids:segments": segments,
            "cumsum_buffer:segments": torch.full(scratch.shape, -1, dtype=torch.int64, device=dev)}
