"""Inputs for fill_padded_rows (astra-sglang, written): the real token count of a padded CUDA-graph
batch, a 0-dim int32 device tensor in [0, T] (0 and T included: all-padding and no-padding batches), and the
fill value SGLang uses per dtype (-1 for int32 top-k ids, 0.0 for float32 weights)."""

import torch


def make_inputs(dims, dtype, gen, device):
    n = torch.randint(0, dims["T"] + 1, (), generator=gen, device=device)
    return {"num_token_non_padded": n.to(torch.int32)}


def scalars(dims, dtype):
    return {"fill_value": -1 if dtype == "int32" else 0.0}
