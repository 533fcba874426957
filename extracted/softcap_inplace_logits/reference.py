"""Reference for softcap_inplace_logits (astra-sglang, written): float32 softcap * tanh(x / softcap)."""

import torch


def reference(**args):
    cap = float(args.get("softcap", 30.0))
    return {"logits": torch.tanh(args["logits"].float() / cap) * cap}
