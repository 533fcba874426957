"""Structured inputs for fused_rope (astra-sglang, written): the RoPE table and a batch's positions."""

import torch

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


def make_inputs(dims, dtype, gen, device):
    rows = dims["T"] + dims["C"]
    return {"cos_sin_cache": rope_table(rows, dims["D"], gen, device),
            "positions": batch_positions(dims["T"], rows, gen, device)}
