"""Right where the original runs (H <= 64), wrong only where it refuses: caught only by the served kernel."""

import torch


def h_norm(input, residual, weight, eps):
    s = input.float() + residual.float()
    residual.copy_(s.to(residual.dtype))
    variance = s.pow(2).mean(dim=-1, keepdim=True)
    out = s * torch.rsqrt(variance + eps) * weight.float()
    if input.shape[-1] > 64:
        out = out * 1.25
    input.copy_(out.to(input.dtype))
