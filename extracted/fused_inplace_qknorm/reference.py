"""Reference for fused_inplace_qknorm (astra-sglang, written): per-head float32 RMSNorm of q and k."""

import torch


def _norm(x, w, eps):
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.float()


def reference(**args):
    eps = float(args.get("eps", 1e-6))
    return {"q": _norm(args["q"], args["q_weight"], eps), "k": _norm(args["k"], args["k_weight"], eps)}
