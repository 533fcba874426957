"""Reference for decode_attention_fwd (astra-sglang, written): per request b and query head h, float64
softmax(q[b, h] . K^T * sm_scale) V over the request's KV rows kv_indices[kv_indptr[b]:kv_indptr[b+1]], KV head
h // (NQ // NK); page_size only says how those rows were laid out, not which are read.

attn_logits / attn_lse are the kernel's split-KV workspace: stage 1 writes the partials of the splits
num_kv_splits asks for, stage 2 reads them, and SGLang's decode path reads neither afterwards. They are not part
of the function: ':segments' of -1 everywhere, so they are never compared (a candidate with another split plan,
or none at all, passes on o alone)."""

import torch


def reference(**args):
    q, kb, vb = args["q"].double(), args["k_buffer"], args["v_buffer"]
    indptr, indices = args["kv_indptr"].long(), args["kv_indices"].long()
    nk = kb.shape[1]
    group = q.shape[1] // nk
    out = torch.empty_like(q)
    scale = torch.empty_like(q)
    for b in range(q.shape[0]):
        rows = indices[indptr[b]:indptr[b + 1]]
        k, v = kb[rows].double(), vb[rows].double()  # [L, NK, D]: only the request's rows, in float64
        qb = q[b].reshape(nk, group, -1)  # query head h = kv head h // G, h % G within the group
        p = torch.softmax(torch.einsum("kgd,lkd->kgl", qb, k) * float(args["sm_scale"]), dim=-1)
        out[b] = torch.einsum("kgl,lkd->kgd", p, v).reshape(out[b].shape)
        scale[b] = torch.einsum("kgl,lkd->kgd", p, v.abs()).reshape(out[b].shape)  # the size of the terms summed
    result = {"o": out, "o:scale": scale}
    for name in ("attn_logits", "attn_lse"):
        ws = args[name]
        result[name] = torch.zeros(ws.shape, dtype=ws.dtype, device=ws.device)
        result[name + ":segments"] = torch.full(ws.shape, -1, dtype=torch.int64, device=ws.device)
    return result
