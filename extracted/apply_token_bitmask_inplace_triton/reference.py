import torch


def reference(logits, bitmask, **_):
    """Plain-torch restatement of xgrammar's apply_token_bitmask_inplace.

    bitmask is int32, bit j of word w of row b is token 32*w + j of row b;
    bit 1 = allowed (logit kept), bit 0 = masked (logit set to -inf).
    Only the first min(V, 32*W) columns are touched; the rest are left as is.
    """
    lg = logits if logits.dim() == 2 else logits.view(1, -1)
    bm = bitmask if bitmask.dim() == 2 else bitmask.view(1, -1)
    B, V = lg.shape
    W = bm.shape[1]
    vocab = min(V, W * 32)
    shifts = torch.arange(32, device=bm.device, dtype=torch.int64)
    bits = ((bm.to(torch.int64)[:, :, None] >> shifts) & 1).reshape(bm.shape[0], W * 32)
    masked = bits[:, :vocab] == 0
    out = lg.clone()
    out[:, :vocab] = out[:, :vocab].masked_fill(masked, float("-inf"))
    return {"logits": out.view_as(logits)}
