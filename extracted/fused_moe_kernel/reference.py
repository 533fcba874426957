"""Reference for fused_moe_kernel (astra-sglang, written; unquantized up-projection, no router weight):
C[t, s, :] = A[t] @ B[topk_ids[t, s]].T in float32, one expert at a time. 'C:scale' is |A| @ |B_e|^T, the size
of the terms each output sums: the checker's relative bound uses it where the dot product cancels."""

import torch


def reference(**args):
    a, b, ids = args["A"].float(), args["B"], args["topk_ids"].long()
    t, tk = ids.shape
    out = torch.zeros(t * tk, b.shape[1], dtype=torch.float32, device=a.device)
    scale = torch.zeros_like(out)
    rows = torch.arange(t * tk, device=a.device)
    flat = ids.reshape(-1)
    for e in torch.unique(flat).tolist():
        pick = rows[flat == e]
        w = b[e].float()
        x = a[pick // tk]
        out[pick] = x @ w.T
        scale[pick] = x.abs() @ w.abs().T
    return {"C": out.reshape(t, tk, -1), "C:scale": scale.reshape(t, tk, -1)}
