import torch


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def reference(**args):
    """Restates sglang get_num_kv_splits_triton as TritonAttnBackend.get_num_kv_splits launches it (grid (1,)).

    seq_lens: [B] int32/int64 decode KV lengths (>= 1).
    num_kv_splits: [B*G] int32, entry s*G + g = splits of sequence s (repeat_interleave by G).
    uneven_batch: [1] int32 = 1 if the batch is uneven (after the 0.8 ratio rule) else 0.
    """
    seq_lens = args["seq_lens"]
    device = seq_lens.device
    num_seq = int(seq_lens.shape[0])
    if args.get("num_kv_splits") is not None:
        G = int(args["num_kv_splits"].shape[0]) // num_seq
    else:
        G = int(args.get("num_group", 1))
    num_head = int(args["num_head"])
    num_kv_head = int(args["num_kv_head"])
    max_kv_splits = int(args["max_kv_splits"])
    core = int(args["device_core_count"])

    s = seq_lens[:num_seq].to(torch.int64).cpu()
    max_len = int(s.max().item())
    min_len = int(s.min().item())
    if max_len * 8 < min_len * 10:
        min_len = max_len
    uneven = 1 if min_len < max_len else 0

    ms1 = min(_cdiv(max_len, min_len), max_kv_splits)
    chunk1 = _cdiv(max_len, ms1)

    # float32 arithmetic exactly as the kernel: float(max_len)/64, log2, max(.,1), core*., trunc to int32
    ext = torch.tensor([max_len], dtype=torch.int64).to(torch.float32) / 64.0
    lg = torch.clamp_min(torch.log2(ext), 1.0)
    prod = torch.tensor([core], dtype=torch.float32) * lg
    ext_core = int(prod.to(torch.int32).item())

    kv_group = num_head // num_kv_head
    if kv_group == 1:
        token_grid = num_seq * G * num_head
    else:
        block_h = min(16, kv_group)
        token_grid = num_seq * G * _cdiv(num_head, block_h)
    ms2 = min(_cdiv(ext_core, token_grid), max_kv_splits)
    chunk2 = _cdiv(max_len, ms2)

    a = (s + chunk1 - 1) // chunk1
    b = (s + chunk2 - 1) // chunk2
    splits = torch.maximum(a, b).to(torch.int32)
    if G > 1:
        splits = splits.repeat_interleave(G)
    return {
        "num_kv_splits": splits.to(device),
        "uneven_batch": torch.tensor([uneven], dtype=torch.int32, device=device),
    }
