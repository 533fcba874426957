"""Correct where the original runs and refusing, like it, above H=64: a candidate may cover less than SGLang."""

import torch


def h_norm(input, residual, weight, eps):
    if input.shape[-1] > 64:
        raise RuntimeError("hidden sizes above 64 are not supported")
    s = input.float() + residual.float()
    residual.copy_(s.to(residual.dtype))
    variance = s.pow(2).mean(dim=-1, keepdim=True)
    input.copy_((s * torch.rsqrt(variance + eps) * weight.float()).to(input.dtype))
