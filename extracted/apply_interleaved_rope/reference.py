"""Reference for apply_interleaved_rope_triton (astra-sglang, written; restates SGLang's
apply_interleaved_rope in srt/layers/rotary_embedding/mrope.py) for mrope_section = [24, 20, 20].

Lane d of the output takes the temporal axis x[0], except lanes d % 3 == 1 below 3*section[1] (height, x[1])
and lanes d % 3 == 2 below 3*section[2] (width, x[2]). A gather: exact."""

SECTION = [24, 20, 20]


def reference(**args):
    x = args["x"]
    out = x[0].clone()
    out[..., 1 : SECTION[1] * 3 : 3] = x[1, ..., 1 : SECTION[1] * 3 : 3]
    out[..., 2 : SECTION[2] * 3 : 3] = x[2, ..., 2 : SECTION[2] * 3 : 3]
    return {"out": out}
