"""Run ON THE GPU (carry [".whl", "extracted"]): does where a batch's KV rows sit in the pool change how much the
decode-attention patch saves? A question of issue 23: the bench predicts 2.17 ms a step saved at bs 128 / ctx 1024
on the H100, the e2e measured 1.65 ms (76%).

The op contract draws every token's slot at random (a pool fragmented by long serving); a fresh server's allocator
hands a prefilled batch contiguous slots, request after request, and each decode step one slot per request after
them. Three layouts, same lengths and split counts, timed side by side (the original SGLang kernel rebuilt from
extracted/, the patch through its installed hook; the harness's one timer, CUDA-graph replays, ABBA):
  random  - the contract's slots
  alloc   - request b's tokens at consecutive slots, requests one after another (prefill only)
  serving - alloc for the first S - 16 tokens, the last 16 of each request one slot per request per step
  serving+qkv - serving, with q a view of the fused qkv rows as LLaMA passes it (the patch's adapter copies it)
Usage: python3 scripts/device/da_layout_probe.py [PATCH_ID] > $OUT/da_layout.json
"""

from __future__ import annotations

import json
import sys
from functools import partial

import torch

from astra_sglang.patches.registry import discover
from astra_sglang.patches.tooling.devcheck import extracted_original, time_pair

SHAPES = [(128, 1024), (32, 1024), (1, 1024), (32, 8192), (1, 8192), (64, 4096)]
DECODED = 16  # tokens each request got one decode step at a time


def layout(kind: str, lens: torch.Tensor, pool: int, old: torch.Tensor) -> torch.Tensor:
    if kind == "random":
        return old
    b = len(lens)
    dec = [min(int(n) - 1, DECODED) if kind == "serving" else 0 for n in lens]  # tokens decoded step by step
    pre = [int(n) - d for n, d in zip(lens, dec)]
    slot = 1  # slot 0 is SGLang's padding slot
    rows: list[list[int]] = []
    for p in pre:  # the prefill: each request's prompt in one run of slots, request after request
        rows.append(list(range(slot, slot + p)))
        slot += p
    for t in range(DECODED):  # each decode step: one slot for every request still decoding, in batch order
        for i in range(b):
            if t >= DECODED - dec[i]:  # request i decoded its last dec[i] tokens in the last dec[i] steps
                rows[i].append(slot)
                slot += 1
    out = [torch.tensor(r, dtype=torch.int64) for r in rows]
    idx = torch.cat(out).to(old.device, old.dtype)
    assert int(idx.max()) < pool, (int(idx.max()), pool)
    return torch.cat([idx, old[len(idx):]])


def qkv_view(q: torch.Tensor) -> torch.Tensor:
    """q as LLaMA's attention layer passes it: a view of the fused qkv projection's rows (q, then k and v of the
    KV heads), row stride (NQ + 2 NK) * D. SGLang's kernel reads it in place; the patch's adapter hands its kernel
    a contiguous copy (the layout the contract checked), a cost the bench never sees."""
    b, nq, d = q.shape
    nk = nq // 4
    rows = torch.empty((b, (nq + 2 * nk) * d), dtype=q.dtype, device=q.device)
    rows[:, : nq * d] = q.reshape(b, -1)
    return rows[:, : nq * d].view(b, nq, d)


def main() -> int:
    pid = sys.argv[1] if len(sys.argv) > 1 else "mr-da2-single-r1"
    entry = next(e for e in discover() if e.patch_id == pid)
    from astra_sglang.patches.adapters import get_adapter
    from astra_sglang.patches.runtime import PatchRuntime

    m = entry.manifest
    assert m is not None
    original = extracted_original(entry)
    from astra_sglang.patches.tooling.verify import current_op_sha256

    rt = PatchRuntime(entry.path, m.model_copy(update={"op_manifest_sha256": current_op_sha256(m)}))
    hook = rt.hook_for(original, m.targets[0])
    assert rt.activate("cuda", original), "the patch did not activate here"
    ad = get_adapter(m.op)
    rows = []
    for b, s in SHAPES:
        dims = {"B": b, "S": s, "NK": 8, "G": 4, "D": 128, "P": 1, "R": 1, "X": 1, "KX": 0, "MS": 8}
        args, kw = ad.sample(dims, torch.bfloat16, "cuda", 7)
        lens = (args[4][1:] - args[4][:-1]).cpu().long()
        pool = args[1].shape[0]
        kv_bytes = 2 * int(lens.sum()) * 8 * 128 * 2  # K and V rows read once (bf16)
        for kind in ("random", "alloc", "serving", "serving+qkv"):
            a = list(args)
            a[5] = layout(kind.split("+")[0], lens, pool, args[5])
            if kind.endswith("+qkv"):
                a[0] = qkv_view(args[0])
            ref = a[3].clone()
            original(*a, **kw)
            ref.copy_(a[3])
            hook(*a, **kw)
            err = float((a[3].float() - ref.float()).abs().max())
            o_us, p_us = time_pair(partial(original, *a, **kw), partial(hook, *a, **kw), 100)
            row = {"B": b, "S": s, "layout": kind, "splits": sorted(set(args[8].tolist())),
                   "original_us": round(o_us, 2), "patch_us": round(p_us, 2), "speedup": round(o_us / p_us, 3),
                   "saved_us": round(o_us - p_us, 2), "original_TBps": round(kv_bytes / o_us / 1e6, 3),
                   "patch_TBps": round(kv_bytes / p_us / 1e6, 3), "max_abs_diff": err}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    print(json.dumps({"device": torch.cuda.get_device_name(), "patch": pid, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
