"""Inputs for memcpy_triton (astra-sglang, written): this rank's start row in the global buffer
(the sum of the earlier ranks' tokens, anywhere in [0, X]) and its token count L, as the 0-dim int64 device
tensors SGLang's cumsum gives."""

import torch


def make_inputs(dims, dtype, gen, device):
    offset = torch.randint(0, dims["X"] + 1, (), generator=gen, device=device)
    return {"offset": offset, "sz": torch.tensor(dims["L"], dtype=torch.int64, device=device)}
