"""A correct h_norm candidate for every hidden size, the ones the original refuses included."""

import torch


def h_norm(input, residual, weight, eps):
    s = input.float() + residual.float()
    residual.copy_(s.to(residual.dtype))
    variance = s.pow(2).mean(dim=-1, keepdim=True)
    input.copy_((s * torch.rsqrt(variance + eps) * weight.float()).to(input.dtype))
