"""Reference for memcpy_triton (astra-sglang, written; restates dp_attention.memcpy_cpu with
offset_src=False): rows [offset, offset + sz) of dst get src's first sz rows."""


def reference(**args):
    dst = args["dst"].clone()
    o, n = int(args["offset"]), int(args["sz"])
    dst[o:o + n] = args["src"][:n]
    return {"dst": dst}
