"""Inputs for compute_position_triton (astra-sglang, written): an extend batch of B requests with mixed
extend lengths summing to B*S (int32, like ForwardBatch's), and cached prefix lengths (0 for new requests)."""

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
    b, s = dims["B"], dims["S"]
    lens = _lengths(b, s, dims["S"] * 3, gen, device)
    prefix = torch.randint(0, 4096, (b,), generator=gen, device=device)
    prefix = torch.where(torch.rand(b, generator=gen, device=device) < 0.3, torch.zeros_like(prefix), prefix)
    return {"extend_prefix_lens": prefix.to(torch.int32), "extend_seq_lens": lens.to(torch.int32)}


def scalars(dims, dtype):
    return {"extend_seq_lens_sum": dims["B"] * dims["S"]}
