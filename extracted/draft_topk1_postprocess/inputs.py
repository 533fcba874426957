"""Inputs for draft_topk1_postprocess (astra-sglang, written): each request's current position (a
context length below 32k) and the draft step (column) this call writes."""

import torch


def make_inputs(dims, dtype, gen, device):
    return {"positions": torch.randint(0, 32768, (dims["B"],), generator=gen, device=device)}


def scalars(dims, dtype):
    return {"draft_token_column": dims["W"] // 2}
