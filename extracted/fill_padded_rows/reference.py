"""Reference for fill_padded_rows (astra-sglang, written; restates topk.py's CPU branch:
x.masked_fill_((arange(T) >= n)[:, None], fill_value))."""

import torch


def reference(**args):
    x = args["x"].clone()
    rows = torch.arange(x.shape[0], device=x.device)
    x.masked_fill_((rows >= args["num_token_non_padded"])[:, None], args["fill_value"])
    return {"x": x}
