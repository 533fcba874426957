"""Inputs for div_argmax (astra-sglang, written): the Exp(1) noise SGLang's denoiser divides by,
clamped away from 0 like the speculative sampler's noise (an exact 0 never reaches the kernel)."""

import torch


def make_inputs(dims, dtype, gen, device):
    noise = torch.empty(dims["R"], dims["V"], dtype=torch.float32, device=device).exponential_(1.0, generator=gen)
    return {"divisor": noise.clamp_min_(torch.finfo(torch.float32).tiny)}
