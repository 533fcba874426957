"""fused_rope: NeoX RoPE of q and k in place, the JIT ``elementwise/rope.cuh`` kernel LLaMA/Qwen use on
CUDA (see ``_rope`` for how SGLang reaches it).
"""

from __future__ import annotations

from astra_sglang.contract.op import (
    CallSite,
    Dim,
    ShapeCase,
    Signature,
    TensorArg,
    op_id_of,
)
from astra_sglang.extract.catalog._rope import HEAD_DIM, MAX_ELEMS, batch_positions, neox, rope_table
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import DECODE_T, PREFILL_T, case, dedup, head_pairs

_ROPE_MODULE = "sglang.kernels.ops.attention.rope"


def _fused_rope_shapes() -> list[ShapeCase]:
    cases: list[ShapeCase] = []
    for i, (nq, nk, src) in enumerate(head_pairs()):
        t_dec, t_pre = DECODE_T[i % len(DECODE_T)], PREFILL_T[i % len(PREFILL_T)]
        cases.append(case(["decode"], f"{src} decode", T=t_dec, NQ=nq, NK=nk, D=HEAD_DIM, C=4096))
        if t_pre * (nq + nk) * HEAD_DIM <= MAX_ELEMS:
            cases.append(case(["prefill"], f"{src} prefill", T=t_pre, NQ=nq, NK=nk, D=HEAD_DIM, C=4096))
    cases += [
        case(["edge", "decode"], "edge: one token", T=1, NQ=32, NK=8, D=HEAD_DIM, C=8191),
        case(["edge"], "edge: MHA (NQ == NK), odd token count", T=77, NQ=5, NK=5, D=HEAD_DIM, C=100),
        case(["edge", "prefill"], "edge: long context table (128k positions)", T=1024, NQ=32, NK=8, D=HEAD_DIM,
             C=130048),
    ]
    return dedup(cases)


def reference(**args):
    cos, sin = args["cos_sin_cache"][args["positions"].long()].chunk(2, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]
    q, q_scale = neox(args["q"], cos, sin)
    k, k_scale = neox(args["k"], cos, sin)
    return {"q": q, "k": k, "q:scale": q_scale, "k:scale": k_scale}


def make_inputs(dims, dtype, gen, device):
    rows = dims["T"] + dims["C"]
    return {"cos_sin_cache": rope_table(rows, dims["D"], gen, device),
            "positions": batch_positions(dims["T"], rows, gen, device)}


REFERENCE = FileText(
    doc=(
        "Reference for fused_rope (astra-sglang, written): NeoX RoPE of q and k in place, float64.\n"
        "\n"
        "Restates RotaryEmbedding.forward_native for rotary_dim == head_size: cos, sin = "
        "cos_sin_cache[positions].chunk(2)\n"
        "and q, k = apply_rotary_emb(q/k, cos, sin, is_neox_style=True) per head."
    ),
    imports=("import torch",),
    functions=(neox, reference),
)

INPUTS = FileText(
    doc="Structured inputs for fused_rope (astra-sglang, written): the RoPE table and a batch's positions.",
    imports=("import torch",),
    functions=(rope_table, batch_positions, make_inputs),
    blank_lines_before_functions=1,
)


ENTRY = CatalogEntry(
    short_name="fused_rope",
    op_id=op_id_of(f"{_ROPE_MODULE}:apply_rope_inplace"),
    entry_point=f"{_ROPE_MODULE}:apply_rope_inplace",
    kind="cuda_jit",
    signature=Signature(
        dims=[
            Dim(name="T", meaning="tokens"),
            Dim(name="NQ", meaning="query heads (after TP)"),
            Dim(name="NK", meaning="KV heads (after TP)"),
            Dim(name="D", meaning="head dim = rope_dim (pinned: a template argument)", min=HEAD_DIM,
                max=HEAD_DIM),
            Dim(name="C", meaning="RoPE table rows beyond T (the table has T + C positions)"),
        ],
        tensors=[
            TensorArg(name="q", role="inplace", shape=["T", "NQ", "D"], dtype="{dtype}"),
            TensorArg(name="k", role="inplace", shape=["T", "NK", "D"], dtype="{dtype}"),
            TensorArg(name="cos_sin_cache", role="input", shape=["T+C", "D"], dtype="float32", generated=True),
            TensorArg(name="positions", role="input", shape=["T"], dtype="int64", align_bytes=8, generated=True),
        ],
        dtypes=["bfloat16", "float16"],
        relations=[
            "cos, sin = cos_sin_cache[positions[t]].chunk(2): D/2 lanes each, float32",
            "NeoX: with x = h[:D/2], y = h[D/2:] of every head h of q[t] and k[t]: "
            "x <- x cos - y sin, y <- x sin + y cos (float32 math, one rounding to the dtype)",
            f"the build is specialised to rope_dim = head_dim = {HEAD_DIM}, is_neox=True, use_pdl=True (sm_90)",
        ],
        returns=[],
    ),
    reference=REFERENCE,
    inputs=INPUTS,
    shapes=_fused_rope_shapes,
    call=["q", "k", "cos_sin_cache", "positions"],
    builder=f"{_ROPE_MODULE}:_jit_fused_rope_module",
    builder_args={"bfloat16": (True, HEAD_DIM, "torch.bfloat16", "torch.bfloat16"),
                  "float16": (True, HEAD_DIM, "torch.float16", "torch.float16")},
    entry_export="run_rope",
    forward_native="sglang.srt.layers.rotary_embedding.base:RotaryEmbedding.forward_native",
    aliases=("apply_rope_inplace", "rope"),
    callsite_modules=(_ROPE_MODULE,),
    serving_sites={
        f"{_ROPE_MODULE}:apply_rope_inplace": "the custom-op wrapper around the JIT module's run_rope",
    },
    extra_sites=[
        CallSite(
            module=_ROPE_MODULE, attr="apply_rope_with_cos_sin_cache_inplace", binds="caller", target=None,
            same_function=True, reached_by_serving=True,
            note="calls apply_rope_inplace when fused_args is None (else apply_rope_inplace_with_kvcache = "
            "run_rope_store of the same module)",
        ),
        CallSite(
            module="sglang.srt.layers.rotary_embedding.base", attr="apply_rope_with_cos_sin_cache_inplace",
            binds="caller", target=None, same_function=True, reached_by_serving=True,
            note="read from source (imported under _is_cuda): RotaryEmbedding.forward_cuda when not "
            "use_fallback_kernel, i.e. head_size in {64, 128, 256, 512}: every LLaMA/Qwen2/Mistral layer's "
            "self.rotary_emb(positions, q, k); q/k there are strided views of the packed qkv",
        ),
    ],
    notes=[
        "JIT module fused_rope (elementwise/rope.cuh), FusedRopeKernel<true, 128, true, dtype, dtype>::run: one "
        "warp-slice per (token, head) over q and k heads, grid = min(occupancy * SMs, work/32)",
        "the contract passes contiguous q [T, NQ, D] and k [T, NK, D]; SGLang passes views of qkv with row stride "
        "(NQ + 2 NK) * D (the kernel takes any token stride, head stride D)",
        "head_size != rotary_dim (partial rotary) uses the same kernel on q[..., :rotary_dim]; not covered here",
    ],
)
