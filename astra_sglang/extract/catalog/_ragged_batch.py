"""The request lengths of a ragged speculative batch, shared by the inputs.py of the ops that read one.

A batch of B requests with B*S tokens in all: every request gets 1..S+E tokens (mixed lengths that sum to
exactly B*S, so the ragged tensors have a shape the signature can state). The helper is written into each of
those inputs.py files (FileText.functions), so it stays the untyped text they pin.
"""

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
