"""Reference for fused_rope (astra-sglang, written): NeoX RoPE of q and k in place, float64.

Restates RotaryEmbedding.forward_native for rotary_dim == head_size: cos, sin = cos_sin_cache[positions].chunk(2)
and q, k = apply_rotary_emb(q/k, cos, sin, is_neox_style=True) per head."""

import torch


def neox(h, cos, sin):
    """NeoX rotation in float64 and the size of its terms (the rounding of any order scales with them)."""
    h = h.double()
    half = h.shape[-1] // 2
    x, y = h[..., :half], h[..., half:]
    c, s = cos.double(), sin.double()
    out = torch.cat((x * c - y * s, x * s + y * c), dim=-1)
    scale = torch.cat(((x * c).abs() + (y * s).abs(), (x * s).abs() + (y * c).abs()), dim=-1)
    return out, scale


def reference(**args):
    cos, sin = args["cos_sin_cache"][args["positions"].long()].chunk(2, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]
    q, q_scale = neox(args["q"], cos, sin)
    k, k_scale = neox(args["k"], cos, sin)
    return {"q": q, "k": k, "q:scale": q_scale, "k:scale": k_scale}
