"""Reference for silu_and_mul_with_activation_rounding (astra-sglang, written): silu(gate) is rounded to the
input dtype before the multiply (eager PyTorch order), then the product is computed in float32."""

import torch


def reference(**args):
    x = args["input"]
    h = x.shape[-1] // 2
    act = torch.nn.functional.silu(x[..., :h].float()).to(x.dtype).float()
    return {"out": act * x[..., h:].float()}
