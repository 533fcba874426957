"""RoPE on the serving hot path: the CUDA JIT kernel LLaMA/Qwen use on CUDA, the fused RoPE + KV store (Triton,
ROCm's path) and the interleaved M-RoPE cos/sin gather (Triton, Qwen3-VL).

The default CUDA path, for a plain LLaMA/Qwen2 config (head_size in {64, 128, 256, 512}, is_neox_style=True):
``RotaryEmbedding.forward_cuda`` (srt/layers/rotary_embedding/base.py) with ``use_fallback_kernel`` False calls
``apply_rope_with_cos_sin_cache_inplace`` (kernels/ops/attention/rope.py), which, without fused KV-store
arguments (LLaMA's ``self.rotary_emb(positions, q, k)`` passes none), calls ``apply_rope_inplace`` -> the JIT
module ``fused_rope`` built from ``elementwise/rope.cuh`` as ``FusedRopeKernel<is_neox, rope_dim, use_pdl,
dtype, q_dtype>::run``. Not sgl_kernel, not FlashInfer: that JIT kernel is what is extracted here.

NeoX rotation over the first rope_dim lanes, halves x = h[:R/2], y = h[R/2:], per position p with
cos_sin_cache[p] = [cos(p*f_0..f_{R/2-1}), sin(...)]: x' = x cos - y sin, y' = x sin + y cos.
"""

from __future__ import annotations

import torch

HEAD_DIM = 128
MAX_ELEMS = 1 << 26


# The cos/sin table and the positions of a simulated batch, shared by the RoPE ops' inputs.py: a few decode
# requests at random lengths within the context, then one prefill chunk at consecutive positions after a
# random prefix. The table has T + C rows (C: context beyond the batch), so every legal T, C is a valid batch.
# These helpers and neox (the rotation both references restate) are written into the op folders as they are.
def rope_table(rows, rope_dim, gen, device, base=500000.0):
    """cat(cos, sin) of p * base^(-2i/rope_dim), float32, as RotaryEmbedding._compute_cos_sin_cache builds it
    (LLaMA-3's base; the kernel reads the table, so the base only sets realistic frequencies)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, rope_dim, 2, dtype=torch.float64, device=device) / rope_dim))
    freqs = torch.arange(rows, dtype=torch.float64, device=device)[:, None] * inv_freq[None, :]
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(torch.float32)


def batch_positions(tokens, rows, gen, device):
    """Positions of a batch: up to 3/8 of the tokens are decode requests at random positions (their current
    length), the rest one prefill chunk at consecutive positions after a random cached prefix."""
    decode = min(tokens, max(1 if tokens < 4 else 0, (3 * tokens) // 8))
    chunk = tokens - decode
    out = [torch.randint(0, rows, (decode,), generator=gen, device=device)]
    if chunk:
        start = int(torch.randint(0, rows - chunk + 1, (1,), generator=gen, device=device))
        out.append(torch.arange(start, start + chunk, device=device))
    return torch.cat(out).to(torch.int64)


def neox(h, cos, sin):
    """NeoX rotation in float64 and the size of its terms (the rounding of any order scales with them)."""
    h = h.double()
    half = h.shape[-1] // 2
    x, y = h[..., :half], h[..., half:]
    c, s = cos.double(), sin.double()
    out = torch.cat((x * c - y * s, x * s + y * c), dim=-1)
    scale = torch.cat(((x * c).abs() + (y * s).abs(), (x * s).abs() + (y * c).abs()), dim=-1)
    return out, scale
