"""Reference for fused_qk_rope_reshape_and_cache (astra-sglang, written), as SGLang's ROCm path calls it:
q_out=q, k_out=k (in place), NeoX, flash layout [pages, page_size, KH, D], no FP8 scales, no SWA remap.

q <- rope(q); for a token with slot s >= 0: k <- rope(k), key_cache[s // BS, s % BS] = rope(k),
value_cache[s // BS, s % BS] = v. A padding token (s < 0) keeps its k unrotated and writes no cache row (the
kernel skips the whole KV branch for it)."""

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
    cos, sin = args["cos_sin"][args["pos"].long()].chunk(2, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]
    q, q_scale = neox(args["q"], cos, sin)
    k_rot, k_rot_scale = neox(args["k"], cos, sin)
    slots = args["slot_mapping"].long()
    keep = slots >= 0
    k = args["k"].double().clone()
    k_scale = k.abs()
    k[keep], k_scale[keep] = k_rot[keep], k_rot_scale[keep]
    key_cache = args["key_cache"].double().clone()
    value_cache = args["value_cache"].double().clone()
    kc_scale = key_cache.abs()
    pages, page_size, heads, dim = key_cache.shape
    key_cache.view(-1, heads, dim)[slots[keep]] = k_rot[keep]
    kc_scale.view(-1, heads, dim)[slots[keep]] = k_rot_scale[keep]
    value_cache.view(-1, heads, dim)[slots[keep]] = args["v"].double()[keep]
    return {"q": q, "k": k, "key_cache": key_cache, "value_cache": value_cache,
            "q:scale": q_scale, "k:scale": k_scale, "key_cache:scale": kc_scale}
