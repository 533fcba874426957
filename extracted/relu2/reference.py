"""Reference for relu2 (astra-sglang, written): float32, out = relu(x) ** 2."""

import torch


def reference(**args):
    x = args["input"].float()
    return {"out": torch.relu(x) ** 2}
