"""Reference for softcap_to_float32_logits (astra-sglang, written): float32 softcap * tanh(x / softcap)."""

import torch


def reference(**args):
    cap = float(args.get("softcap", 30.0))
    return {"output": torch.tanh(args["logits"].float() / cap) * cap}
