"""Reference for div_argmax (astra-sglang, written): the first maximum of the float32 quotient."""


def reference(**args):
    return {"index": (args["x"] / args["divisor"]).argmax(dim=-1)}
