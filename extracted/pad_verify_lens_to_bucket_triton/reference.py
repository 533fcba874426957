"""Reference for pad_verify_lens_to_bucket_triton (astra-sglang, written; restates SGLang's torch
pad_verify_lens_to_bucket): the leftover graph tokens are spread over the padding requests (the first rem get
one more), or added to the last real request when there is no padding request."""

import torch


def reference(**args):
    lens, bs, padded_bs = args["lens"].to(torch.int32), args["n_real"], args["n_padded"]
    leftover = args["graph_tokens"] - int(lens.long().sum())
    n_pad = padded_bs - bs
    if n_pad > 0:
        base, rem = leftover // n_pad, leftover % n_pad
        pad = base + (torch.arange(n_pad, device=lens.device) < rem).long()
        return {"padded": torch.cat([lens, pad.to(torch.int32)])}
    out = lens.clone()
    out[-1] = out[-1] + leftover
    return {"padded": out}
