"""Reference for fused_moe_down (astra-sglang, written; unquantized w2 down-projection, routing weight on the
output): C[t, s, :] = topk_weights[t, s] * (A[t*TK + s] @ B[topk_ids[t, s]].T) in float32, one expert at a
time. 'C:scale' is |w| * (|A| @ |B_e|^T), the size of the terms each output sums: the checker's relative
bound uses it where the dot product cancels."""

import torch


def reference(**args):
    a, b, ids = args["A"].float(), args["B"], args["topk_ids"].long()
    w = args["topk_weights"].float().reshape(-1, 1)
    t, tk = ids.shape
    out = torch.zeros(t * tk, b.shape[1], dtype=torch.float32, device=a.device)
    scale = torch.zeros_like(out)
    rows = torch.arange(t * tk, device=a.device)
    flat = ids.reshape(-1)
    for e in torch.unique(flat).tolist():
        pick = rows[flat == e]
        wb = b[e].float()
        x = a[pick]
        out[pick] = (x @ wb.T) * w[pick]
        scale[pick] = (x.abs() @ wb.abs().T) * w[pick].abs()
    return {"C": out.reshape(t, tk, -1), "C:scale": scale.reshape(t, tk, -1)}
