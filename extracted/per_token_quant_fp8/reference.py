"""Reference for per_token_quant_fp8 (astra-sglang, written): float32 per-row absmax scaling to FP8 E4M3.

scale = max|x| / 448 per row; q = clamp(x / scale, -448, 448) rounded to fp8 by the checker (round to nearest
even, as the kernel's cast). A row of zeros has scale 0 and q = 0 (nothing to scale)."""

import torch

FP8_MAX = 448.0


def reference(**args):
    x = args["input"].float()
    scale = x.abs().amax(dim=-1, keepdim=True) / FP8_MAX
    inv = torch.where(scale == 0, torch.zeros_like(scale), 1.0 / scale)
    q = (x * inv).clamp(-FP8_MAX, FP8_MAX)
    return {"output_q": q, "output_s": scale}
