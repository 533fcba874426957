"""Reference for gelu_tanh_and_mul (astra-sglang, written): float32, out = gelu_tanh(x[..., :H]) * x[..., H:]."""

import torch


def reference(**args):
    x = args["input"].float()
    h = x.shape[-1] // 2
    gate, up = x[..., :h], x[..., h:]
    return {"out": torch.nn.functional.gelu(gate, approximate='tanh') * up}
