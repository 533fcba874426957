"""merge_state: SGLang's Triton ``merge_state_triton`` (base-e LSE) and FlashInfer's CUDA MergeState (base 2).

Merging two partial attention results over disjoint key sets: with a = exp(lse_a), b = exp(lse_b),
out = (a*v_a + b*v_b)/(a+b), lse = log(a+b). An LSE of +inf marks an empty partial and is treated as -inf.
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import (
    CallSite,
    Dim,
    ShapeCase,
    Signature,
    TensorArg,
    hook_target,
)
from astra_sglang.extract.catalog.base import CatalogEntry, FlashInferBaseline
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import case, decode_prefill, dedup, model_widths

_ENTRY = "sglang.kernels.ops.attention.merge_state:merge_state_triton"


def _shapes() -> list[ShapeCase]:
    heads = model_widths(lambda m, tp: m.heads // tp if m.heads % tp == 0 else None)
    cases = [
        case(["paper"], "Astra paper", T=512, NH=40, D=128),
        case(["paper"], "Astra paper", T=512, NH=32, D=256),
        case(["paper"], "Astra paper", T=512, NH=64, D=128),
        case(["paper"], "Astra paper", T=768, NH=32, D=256),
        *decode_prefill(({"NH": nh, "D": 128}, src) for nh, src in heads),
        case(["edge", "decode"], "edge: one token", T=1, NH=32, D=128),
        case(["edge"], "edge: largest head count (128 heads, DeepSeek-style MLA at TP1)", T=256, NH=128, D=128),
        case(["edge"], "edge: > 64 heads at D=128 (SGLang serves Triton here)", T=512, NH=96, D=128),
        case(["edge"], "edge: head_dim not a power of two (padded lanes)", T=64, NH=16, D=96),
        case(["prefill", "anchor"], "anchor h200.md", T=8192, NH=32, D=128),
    ]
    return dedup(cases)


def _trace(tensors: list[tuple[str, list[int]]]) -> dict[str, int] | None:
    if not tensors or len(tensors[0][1]) != 3:
        return None
    t, nh, d = tensors[0][1]
    return {"T": t, "NH": nh, "D": d}


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


REFERENCE = FileText(
    doc=(
        "Reference for merge_state_triton (astra-sglang, written; base-e LSE like SGLang's Triton kernel).\n"
        "\n"
        "lse = +inf is read as -inf (an empty partial). When both LSEs are -inf the kernel computes -inf - (-inf)\n"
        "= NaN and so does this reference: compare with equal_nan there."
    ),
    imports=("import torch",),
    functions=(reference,),
)


ENTRY = CatalogEntry(
    short_name="merge_state",
    op_id="attention.merge_state_triton",
    entry_point=_ENTRY,
    kind="triton",
    signature=Signature(
        dims=[
            Dim(name="T", meaning="tokens"),
            Dim(name="NH", meaning="query heads (after TP)"),
            Dim(name="D", meaning="head dim"),
        ],
        tensors=[
            TensorArg(name="prefix_output", role="input", shape=["T", "NH", "D"], dtype="{dtype}"),
            TensorArg(name="prefix_lse", role="input", shape=["T", "NH"], dtype="float32", align_bytes=4,
                      special_values=["+inf", "-inf"]),
            TensorArg(name="suffix_output", role="input", shape=["T", "NH", "D"], dtype="{dtype}"),
            TensorArg(name="suffix_lse", role="input", shape=["T", "NH"], dtype="float32", align_bytes=4,
                      special_values=["+inf", "-inf"]),
            TensorArg(name="output", role="output", shape=["T", "NH", "D"], dtype="{dtype}"),
            TensorArg(name="output_lse", role="output", shape=["T", "NH"], dtype="float32", align_bytes=4),
        ],
        dtypes=["bfloat16", "float16", "float32"],
        relations=[
            "LSEs are natural-log (base e) log-sum-exp values",
            "lse = +inf is treated as -inf (empty partial); both -inf gives NaN (kernel and reference)",
            "output = (exp(p_lse)*prefix_output + exp(s_lse)*suffix_output) / (exp(p_lse) + exp(s_lse))",
            "output_lse = log(exp(p_lse) + exp(s_lse))",
        ],
        # callers unpack it (`o, _ = _safe_merge_state(...)` in flashinfer_backend.py)
        returns=["output", "output_lse"],
    ),
    reference=REFERENCE,
    shapes=_shapes,
    call=["prefix_output", "prefix_lse", "suffix_output", "suffix_lse", "output", "output_lse"],
    wrapper=_ENTRY,
    aliases=("merge_state_triton",),
    callsite_modules=("sglang.kernels.ops.attention.merge_state", "sglang.srt.layers.attention.merge_state",
                      "sglang.srt.layers.attention.flashinfer_backend", "sglang.srt.layers.attention.aiter_backend"),
    serving_sites={
        _ENTRY: "the definition; the serving path reaches it through the bindings below",
        "sglang.srt.layers.attention.flashinfer_backend:merge_state_triton": "FlashInfer backend _safe_merge_state "
        "when num_heads > 1024/(head_dim/vec) (more than 64 heads at head_dim 128 bf16); receives FlashInfer's "
        "base-2 LSEs there (a suspected base mismatch, unconfirmed on GPU)",
        "sglang.srt.layers.attention.merge_state:merge_state_triton": "fallback of merge_state when not CUDA or "
        "the dtype/head_dim is unsupported by sgl_kernel.merge_state_v2",
        "sglang.srt.layers.attention.aiter_backend:merge_state_triton": "AMD aiter backend (not CUDA serving)",
    },
    extra_sites=[
        CallSite(
            module="sglang.srt.layers.attention.flashinfer_backend", attr="merge_state_triton", binds="entry_point",
            target=hook_target(_ENTRY), same_function=True, reached_by_serving=True,
            note="read from source (the module does not import on this CPU host): `from sglang.kernels.ops.attention."
            "merge_state import merge_state_triton` under CUDA, used by _safe_merge_state above 64 heads at D=128",
        ),
        CallSite(
            module="sglang.srt.layers.attention.flashinfer_backend", attr="merge_state",
            binds="flashinfer_merge_state", target="flashinfer.cascade.merge_state", same_function=False,
            reached_by_serving=True,
            note="read from source: `from flashinfer.cascade import merge_state` under CUDA, used by _safe_merge_state "
            "up to 64 heads at D=128; base-2 LSE, a different function: a patch of this op never stands in for it",
        ),
    ],
    flashinfer_baselines=[
        FlashInferBaseline(
            name="flashinfer_merge_state",
            header="flashinfer/attention/cascade.cuh",
            glue="flashinfer_merge_state.cuh",
            template_args={"bfloat16": "nv_bfloat16", "float16": "half"},
            exports=[("merge_state", "astra_glue::FlashInferMergeState<{targs}>::run")],
            entry="merge_state",
            call=["prefix_output", "prefix_lse", "suffix_output", "suffix_lse", "output", "output_lse"],
            description="flashinfer.cascade.merge_state = FlashInfer's MergeState (attention/cascade.cuh), rebuilt "
            "from the installed flashinfer-python headers with our tvm-ffi glue",
            when="SGLang's FlashInfer attention backend (_safe_merge_state) when num_heads <= 1024/(head_dim/vec), "
            "i.e. up to 64 heads at head_dim 128 in bf16; head_dim in {64,128,256,512}",
            same_function=False,
            note="base-2 LSE (ptx_exp2/ptx_log2) vs SGLang Triton's base e: a different function; time it as the "
            "serving baseline, check it only against a base-2 reference (lse_e * log2(e))",
        )
    ],
    trace_dims=_trace,
    notes=["Triton kernel: merge_state_kernel, launched on grid (T, NH) with PADDED_HEAD_SIZE = next_pow2(D)."],
)

