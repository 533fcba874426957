"""Inputs for pack_verify_mask_into (astra-sglang, written): B requests whose KV lengths (prefix + Q draft
tokens) lie in [1, K+E] and sum to B*K, their kv_indptr, the byte offsets packed_indptr = [0, cumsum(ceil(Q *
kv_len / 8))] that SGLang computes on the host, and a random tree mask (each bit 1 with probability 1/2)."""

import torch


def _lengths(b, s, e, gen, device):
    """B lengths in [1, s+e] summing to b*s: start even, then move tokens between random pairs. The moves run on
    Python ints: on tensor elements they took seconds a set at B8 S2048, and a GPU timing builds up to 1000 sets."""
    lens = [s] * b
    if b > 1 and (s > 1 or e > 0):
        pairs = torch.randint(0, b, (4 * b * s, 2), generator=gen, device=device).cpu()
        for i, j in pairs.tolist():
            if i != j and lens[i] < s + e and lens[j] > 1:
                lens[i] += 1
                lens[j] -= 1
    return torch.tensor(lens, dtype=torch.int64, device=device)


def make_inputs(dims, dtype, gen, device):
    b, k, q = dims["B"], dims["K"], dims["Q"]
    lens = _lengths(b, k, dims["E"], gen, device)
    kv = torch.zeros(b + 1, dtype=torch.int64, device=device)
    kv[1:] = torch.cumsum(lens, 0)
    packed = torch.zeros(b + 1, dtype=torch.int64, device=device)
    packed[1:] = torch.cumsum((lens * q + 7) // 8, 0)
    mask = torch.rand(b * k * q, generator=gen, device=device) < 0.5
    return {"mask": mask, "kv_indptr": kv.to(torch.int32), "packed_indptr": packed.to(torch.int32)}


def scalars(dims, dtype):
    return {"n_requests": dims["B"], "q_width": dims["Q"], "kv_len_bound": dims["K"] + dims["E"]}
