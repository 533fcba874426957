"""Reference for decode_attention_fwd (astra-sglang, written): per request b and query head h, float64
softmax(q[b, h] . K^T * sm_scale) V over the request's KV rows kv_indices[kv_indptr[b]:kv_indptr[b+1]], KV head
h // (NQ // NK). attn_logits / attn_lse are the kernel's split-KV workspace: not part of the function."""

import torch


def reference(**args):
    q, kb, vb = args["q"].double(), args["k_buffer"].double(), args["v_buffer"].double()
    indptr, indices = args["kv_indptr"].long(), args["kv_indices"].long()
    group = q.shape[1] // kb.shape[1]
    out = torch.empty_like(q)
    scale = torch.empty_like(q)
    for b in range(q.shape[0]):
        rows = indices[indptr[b]:indptr[b + 1]]
        k = kb[rows].repeat_interleave(group, dim=1)  # [L, NQ, D]
        v = vb[rows].repeat_interleave(group, dim=1)
        p = torch.softmax(torch.einsum("hd,lhd->hl", q[b], k) * float(args["sm_scale"]), dim=-1)
        out[b] = torch.einsum("hl,lhd->hd", p, v)
        scale[b] = torch.einsum("hl,lhd->hd", p, v.abs())  # the size of the terms each output sums
    return {"o": out, "o:scale": scale}
