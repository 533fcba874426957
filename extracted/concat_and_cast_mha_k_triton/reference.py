"""Reference for concat_and_cast_mha_k_triton (astra-sglang, written): torch.cat of the per-head
no-rope part and the rope part broadcast over heads."""

import torch


def reference(**args):
    nope, rope = args["k_nope"], args["k_rope"]
    k = args["k"]
    return {"k": torch.cat([nope, rope.expand(-1, nope.shape[1], -1)], dim=-1).to(k.dtype)}
