"""Reference for rmsnorm (astra-sglang, written): float32 x * rsqrt(mean(x^2) + eps) * w."""

import torch


def reference(**args):
    x = args["input"].float()
    eps = float(args.get("eps", 1e-6))
    return {"out": x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * args["weight"].float()}
