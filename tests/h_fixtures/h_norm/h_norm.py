"""The h_norm test fixture's "original" (ours): fused add + RMSNorm in place that, like SGLang's JIT
fused_add_rmsnorm above 8192, refuses hidden sizes above 64."""

import torch


def h_norm(input, residual, weight, eps):
    if input.shape[-1] > 64:
        raise RuntimeError("h_norm: hidden sizes above 64 are not supported")
    s = input.float() + residual.float()
    residual.copy_(s.to(residual.dtype))
    variance = s.pow(2).mean(dim=-1, keepdim=True)
    input.copy_((s * torch.rsqrt(variance + eps) * weight.float()).to(input.dtype))
