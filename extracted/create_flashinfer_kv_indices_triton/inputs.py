import torch

# Extra columns of the req_to_token table past the longest live row: SGLang's
# table is max_context_len wide (plus speculative headroom), wider than any
# live length, so rows are not contiguous runs of the stream.
TABLE_PAD = 128


def _table_width(L: int) -> int:
    return L + TABLE_PAD


def make_inputs(dims, dtype, gen, device):
    B = int(dims["B"])
    L = int(dims["L"])
    C = _table_width(L)
    R = 2 * B + 1  # req_to_token pool rows; row 0 is SGLang's padding row

    # KV slot ids: a random permutation of a token pool (slot 0 = padding slot).
    pool = torch.randperm(R * C, generator=gen, device=device) + 1
    req_to_token = pool.to(torch.int32).view(R, C).contiguous()

    # Distinct live request rows, in random order, never the padding row 0.
    req_pool_indices = (
        torch.randperm(R - 1, generator=gen, device=device)[:B] + 1
    ).to(torch.int64)

    # Mixed lengths in [max(1, L//4), L]; one request is the longest (L).
    lo = max(1, L // 4)
    seq_lens = torch.randint(lo, L + 1, (B,), generator=gen, device=device,
                             dtype=torch.int64)
    longest = torch.randint(0, B, (1,), generator=gen, device=device)
    seq_lens[longest] = L

    # Window starts (sliding-window / cross-attention offsets): about half the
    # lanes read from column 0, the rest from a random start that keeps
    # start + len inside the table row.
    slack = (C - seq_lens).to(torch.float64)
    u = torch.rand((B,), generator=gen, device=device, dtype=torch.float64)
    start = torch.floor(u * (slack + 1.0)).to(torch.int64)
    start = torch.minimum(start, C - seq_lens)
    keep = torch.rand((B,), generator=gen, device=device) < 0.5
    kv_start_idx = torch.where(keep, start, torch.zeros_like(start))

    kv_indptr = torch.zeros((B + 1,), dtype=torch.int32, device=device)
    kv_indptr[1:] = torch.cumsum(seq_lens, 0).to(torch.int32)

    # Pre-sized stream buffer (as under CUDA graphs), sentinel-filled so the
    # untouched tail is checked to stay untouched.
    kv_indices = torch.full((B * L,), -1, dtype=getattr(torch, dtype), device=device)

    return {
        "req_to_token": req_to_token,
        "req_pool_indices": req_pool_indices,
        "seq_lens": seq_lens,
        "kv_indptr": kv_indptr,
        "kv_start_idx": kv_start_idx,
        "kv_indices": kv_indices,
    }


def scalars(dims, dtype):
    return {"req_to_token_stride": _table_width(int(dims["L"]))}
