"""Reference for fused_add_rmsnorm (astra-sglang, written; restates RMSNorm.forward_native with a
residual in float32): residual <- input + residual; input <- (residual * rsqrt(mean(residual^2) + eps)) * weight.
Both results are returned in float32; the kernel stores them in the case dtype (one rounding each)."""

import torch


def reference(**args):
    eps = float(args.get("eps", 1e-6))
    s = args["input"].float() + args["residual"].float()
    variance = s.pow(2).mean(dim=-1, keepdim=True)
    normed = s * torch.rsqrt(variance + eps) * args["weight"].float()
    return {"input": normed, "residual": s}
