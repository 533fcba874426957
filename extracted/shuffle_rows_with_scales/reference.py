"""Reference for shuffle_rows_with_scales (astra-sglang, written): two row gathers by one map."""


def reference(**args):
    m = args["dst2src_map"][:args["num_dst_rows"]].long()
    return {"q_out": args["q"][m], "scale_out": args["scale"][m]}
