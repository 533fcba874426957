import torch


def _tdtype(dtype):
    name = str(dtype).replace("torch.", "")
    return torch.int32 if name == "int32" else torch.int64


def make_inputs(dims, dtype, gen, device):
    """A decode batch's KV lengths: B sequences, the longest exactly L.

    The batch kind is drawn from gen: mixed uniform lengths in [1, L], a near-even batch
    (all within 15% of L, which the kernel treats as even) or a bimodal batch
    (short prompts + long contexts).
    """
    B = int(dims["B"])
    L = int(dims["L"])
    gdev = gen.device
    mode = int(torch.randint(0, 3, (1,), generator=gen, device=gdev).item())
    if mode == 0:
        s = torch.randint(1, L + 1, (B,), generator=gen, device=gdev)
    elif mode == 1:
        lo = max(1, (85 * L + 99) // 100)
        s = torch.randint(lo, L + 1, (B,), generator=gen, device=gdev)
    else:
        short_hi = max(1, L // 16)
        long_lo = max(1, L // 2)
        short = torch.randint(1, short_hi + 1, (B,), generator=gen, device=gdev)
        long = torch.randint(long_lo, L + 1, (B,), generator=gen, device=gdev)
        pick = torch.rand((B,), generator=gen, device=gdev) < 0.5
        s = torch.where(pick, short, long)
    idx = int(torch.randint(0, B, (1,), generator=gen, device=gdev).item())
    s[idx] = L
    return {"seq_lens": s.to(_tdtype(dtype)).to(device).contiguous()}


def scalars(dims, dtype):
    return {
        "num_head": int(dims["KV"]) * int(dims["QG"]),
        "num_kv_head": int(dims["KV"]),
        "max_kv_splits": int(dims["S"]),
        "device_core_count": 132,
    }
