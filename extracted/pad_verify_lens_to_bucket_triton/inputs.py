"""Inputs for pad_verify_lens_to_bucket_triton (astra-sglang, written): each real request verifies
1..Q tokens; the captured graph holds (B+P)*Q tokens for B+P request slots."""

import torch


def make_inputs(dims, dtype, gen, device):
    return {"lens": torch.randint(1, dims["Q"] + 1, (dims["B"],), generator=gen, device=device)
            .to(torch.int32)}


def scalars(dims, dtype):
    b, p = dims["B"], dims["P"]
    return {"graph_tokens": (b + p) * dims["Q"], "n_real": b, "n_padded": b + p}
