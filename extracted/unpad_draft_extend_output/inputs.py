"""Inputs for unpad_draft_extend_output (astra-sglang, written): B draft-extend requests with accepted lengths in [1, M]
(M = S + E draft slots) summing to B*S, and their prefix sum cu_seqlens_q (int32, [B+1], as SGLang's
qo_indptr)."""

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


def scalars(dims, dtype):
    return {"sum_seq_lens_q": dims["B"] * dims["S"]}


def make_inputs(dims, dtype, gen, device):
    lens = _lengths(dims["B"], dims["S"], dims["E"], gen, device)
    cu = torch.zeros(dims["B"] + 1, dtype=torch.int64, device=device)
    cu[1:] = torch.cumsum(lens, 0)
    return {"seq_lens_q": lens.to(torch.int32), "cu_seqlens_q": cu.to(torch.int32)}
