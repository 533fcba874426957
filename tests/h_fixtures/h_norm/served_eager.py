"""What the h_norm fixture says SGLang serves above H=64 (ours): eager torch in the shape of SGLang's
RMSNorm.forward_native, returning new tensors instead of writing the buffers."""

import torch


def forward_native(x, residual, weight, eps):
    orig_dtype = x.dtype
    x = x.to(torch.float32)
    x = x + residual.to(torch.float32)
    residual = x.to(orig_dtype)
    variance = x.pow(2).mean(dim=-1, keepdim=True)
    x = x * torch.rsqrt(variance + eps)
    x = (x * weight).to(orig_dtype)
    return x, residual
