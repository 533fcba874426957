"""STAND-IN for vllm._custom_ops.rotary_embedding, in torch (in place on query and key), so SGLang's server can run
a small model on a CPU host for validate's end-to-end test. Not vLLM's code."""

import torch


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    if is_neox:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)


def rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox=True):
    pos = positions.flatten()
    n = pos.shape[0]
    cos, sin = cos_sin_cache.index_select(0, pos).chunk(2, dim=-1)
    rot = cos.shape[-1] * 2
    cos, sin = cos.unsqueeze(1).float(), sin.unsqueeze(1).float()
    for t in (query, key):
        if t is None:
            continue
        v = t.view(n, -1, head_size)
        v[..., :rot] = _rotate(v[..., :rot].float(), cos, sin, is_neox).to(t.dtype)
