"""Reference for draft_topk1_postprocess (astra-sglang, written): greedy top-1 of the float32 logits
(NaN never wins: read as -1e30 like the kernel; ties go to the lowest index like torch.argmax)."""

import torch


def reference(**args):
    x = args["next_token_logits"].float()
    x = torch.where(torch.isnan(x), torch.full_like(x, -1e30), x)
    index = x.argmax(dim=-1, keepdim=True)
    tokens = args["draft_tokens"].clone()
    tokens[:, args["draft_token_column"]] = index[:, 0]
    return {"topk_p": torch.ones_like(index, dtype=torch.float32), "topk_index": index,
            "positions": args["positions"] + 1, "draft_tokens": tokens}
