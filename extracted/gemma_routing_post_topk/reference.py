"""Reference for gemma_routing_post_topk (astra-sglang, written): float64 softmax of the top-k
logits times the gathered per-expert scale (SGLang's unfused torch expression)."""

import torch


def reference(**args):
    p = torch.softmax(args["topk_logits"].double(), dim=-1)
    ids = args["topk_ids"]
    scale = args["per_expert_scale"].double()[ids]
    return {"weights": (p * scale).float(), "ids": ids.to(torch.int32)}
