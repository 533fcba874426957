"""Reference for pad_draft_extend_query (astra-sglang, written): request b's tokens
q[cu[b] : cu[b] + len[b]] go to padded_q[b, :len[b]]; the rest of padded_q is left as it was."""


def reference(**args):
    out = args["padded_q"].clone()
    q, lens, cu = args["q"], args["seq_lens_q"].tolist(), args["cu_seqlens_q"].tolist()
    for b, n in enumerate(lens):
        out[b, :n] = q[cu[b]:cu[b] + n]
    return {"padded_q": out}
