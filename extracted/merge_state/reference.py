"""Reference for merge_state_triton (astra-sglang, written; base-e LSE like SGLang's Triton kernel).

lse = +inf is read as -inf (an empty partial). When both LSEs are -inf the kernel computes -inf - (-inf)
= NaN and so does this reference: compare with equal_nan there."""

import torch


def reference(**args):
    inf = float("inf")
    p_lse = args["prefix_lse"].float()
    s_lse = args["suffix_lse"].float()
    p_lse = torch.where(p_lse == inf, torch.full_like(p_lse, -inf), p_lse)
    s_lse = torch.where(s_lse == inf, torch.full_like(s_lse, -inf), s_lse)
    m = torch.maximum(p_lse, s_lse)
    p = torch.exp(p_lse - m)
    s = torch.exp(s_lse - m)
    total = p + s
    out = args["prefix_output"].float() * (p / total).unsqueeze(-1) + args["suffix_output"].float() * (
        s / total
    ).unsqueeze(-1)
    # The size of the terms each result is mixed from: the rounding error of any valid arithmetic order
    # scales with these, not with the (possibly cancelled) result (see astra_sglang.checker.scale_key).
    out_scale = torch.maximum(args["prefix_output"].float().abs(), args["suffix_output"].float().abs())
    lse_scale = torch.maximum(p_lse.abs(), s_lse.abs()).nan_to_num(0.0, posinf=0.0, neginf=0.0)
    return {"output": out, "output_lse": torch.log(total) + m,
            "output:scale": out_scale, "output_lse:scale": lse_scale}
