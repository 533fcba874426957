"""Reference for extend_attention_fwd (astra-sglang, written; causal, no custom mask, page size 1): query i
of request b (rows qo_indptr[b]..) attends to all of its cached prefix k_buffer[kv_indices[kv_indptr[b]:
kv_indptr[b+1]]] and to its own new tokens j <= i (k_extend rows qo_indptr[b] + j), float64, KV head h // G."""

import torch


def reference(**args):
    q, ke, ve = args["q_extend"].double(), args["k_extend"].double(), args["v_extend"].double()
    kb, vb = args["k_buffer"].double(), args["v_buffer"].double()
    qo, kv, indices = args["qo_indptr"].long(), args["kv_indptr"].long(), args["kv_indices"].long()
    group = q.shape[1] // ke.shape[1]
    out, scale = torch.empty_like(q), torch.empty_like(q)
    for b in range(qo.numel() - 1):
        rows = indices[kv[b]:kv[b + 1]]
        lo, hi = int(qo[b]), int(qo[b + 1])
        k = torch.cat((kb[rows], ke[lo:hi])).repeat_interleave(group, dim=1)  # [P + E, NQ, D]
        v = torch.cat((vb[rows], ve[lo:hi])).repeat_interleave(group, dim=1)
        n_pre, n_ext = rows.numel(), hi - lo
        visible = torch.ones(n_ext, n_pre + n_ext, dtype=torch.bool, device=q.device)
        visible[:, n_pre:] = torch.ones(n_ext, n_ext, dtype=torch.bool, device=q.device).tril()
        logits = torch.einsum("ihd,lhd->hil", q[lo:hi], k) * float(args["sm_scale"])
        p = torch.softmax(logits.masked_fill(~visible, float("-inf")), dim=-1)
        out[lo:hi] = torch.einsum("hil,lhd->ihd", p, v)
        scale[lo:hi] = torch.einsum("hil,lhd->ihd", p, v.abs())
    return {"o_extend": out, "o_extend:scale": scale}
