"""Reference for per_token_group_quant (astra-sglang, written): per 1x128 group absmax scaling.

amax = max(max |x| over the group, 1e-10); scale = amax / 448 (row-major [T, H/128]);
q = clamp(x * 448 / amax, -448, 448), rounded to fp8 by the checker (round to nearest even, saturating)."""

import torch

FP8_MAX = 448.0
GROUP = 128


def reference(**args):
    x = args["input"].float()
    t, h = x.shape
    g = x.reshape(t, h // GROUP, GROUP)
    amax = g.abs().amax(dim=-1, keepdim=True).clamp_min(1e-10)
    q = (g * (FP8_MAX / amax)).clamp(-FP8_MAX, FP8_MAX).reshape(t, h)
    return {"output_q": q, "output_s": (amax / FP8_MAX).reshape(t, h // GROUP)}
