import torch


def make_inputs(dims, dtype, gen, device):
    """A batch of grammar-constrained requests' packed token bitmasks.

    Layout as xgrammar's get_bitmask_shape(B, V): int32 [B, ceil(V/32)], bit j of word w
    = token 32*w + j, 1 = allowed. Rows mix the states SGLang sees:
      kind 0: unconstrained / finished request -> the buffer's -1 fill (all bits set);
      kind 1: structural JSON/regex state -> only 1..64 tokens allowed;
      kind 2: free-text state (inside a JSON string) -> ~90% of tokens allowed;
      kind 3: ~50% allowed (random bits).
    Padding bits past V in the last word are 0 for constrained rows, 1 for kind 0.
    """
    B = int(dims["B"])
    V = int(dims["V"])
    W = (V + 31) // 32
    kinds = torch.randint(0, 4, (B,), generator=gen, device=device)
    p_allowed = torch.tensor([1.0, 0.0, 0.9, 0.5], dtype=torch.float32, device=device)[kinds]
    u = torch.rand((B, W * 32), generator=gen, device=device)
    allowed = u < p_allowed[:, None]
    del u
    # sparse rows: a handful of allowed token ids
    n_sparse = torch.randint(1, 65, (B,), generator=gen, device=device)
    tok = torch.randint(0, V, (B, 64), generator=gen, device=device)
    keep = torch.arange(64, device=device)[None, :] < n_sparse[:, None]
    src = ((kinds == 1)[:, None] & keep).to(torch.int32)
    hits = torch.zeros((B, W * 32), dtype=torch.int32, device=device)
    hits.scatter_add_(1, tok, src)
    allowed |= hits > 0
    del hits
    if W * 32 > V:
        allowed[:, V:] = (kinds == 0)[:, None]
    shifts = torch.arange(32, device=device, dtype=torch.int64)
    words = (allowed.view(B, W, 32).to(torch.int64) << shifts).sum(dim=-1)
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    return {"bitmask": words.contiguous()}
