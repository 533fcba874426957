"""Reference for cast_to_float32_logits (astra-sglang, written): an exact widening cast."""


def reference(**args):
    return {"output": args["logits"].float()}
