"""fused_qk_rope_reshape_and_cache: RoPE of q and k fused with the paged KV-cache store (Triton,
ROCm's serving path).
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import (
    CallSite,
    Dim,
    ShapeCase,
    Signature,
    TensorArg,
)
from astra_sglang.extract.catalog._rope import HEAD_DIM, MAX_ELEMS, batch_positions, neox, rope_table
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import DECODE_T, PREFILL_T, case, dedup, head_pairs

_FQR_MODULE = "sglang.kernels.ops.attention.fused_qk_rope_reshape_and_cache"

_FQR_PAGE = 16


def _fqr_shapes() -> list[ShapeCase]:
    cases: list[ShapeCase] = []
    for i, (nq, nk, src) in enumerate(head_pairs()):
        for tag, ts in (("decode", DECODE_T), ("prefill", PREFILL_T)):
            t = ts[i % len(ts)]
            dims = {"T": t, "KH": nk, "G": nq // nk, "D": HEAD_DIM, "BS": _FQR_PAGE, "X": t // _FQR_PAGE + 2,
                    "C": 4096}
            if max(t * nq, 2 * t * nk + 3 * _FQR_PAGE * nk) * HEAD_DIM <= MAX_ELEMS:
                cases.append(case([tag], f"{src} {tag}", **dims))
    cases += [
        case(["edge", "decode"], "edge: one token", T=1, KH=8, G=4, D=HEAD_DIM, BS=_FQR_PAGE, X=64, C=8191),
        case(["edge"], "edge: MHA (G = 1), odd token count", T=45, KH=5, G=1, D=HEAD_DIM, BS=_FQR_PAGE, X=6,
             C=100),
        # the CPU suite (TRITON_INTERPRET=1 runs one program per (token, q head)): few programs, still a padded
        # token (T // 4 of them), GQA and MHA, a slot past the first page
        case(["test"], "CPU: GQA, one padded token", T=4, KH=1, G=2, D=HEAD_DIM, BS=_FQR_PAGE, X=2, C=3),
        case(["test"], "CPU: MHA, two KV heads", T=3, KH=2, G=1, D=HEAD_DIM, BS=_FQR_PAGE, X=2, C=5),
        case(["test", "decode"], "CPU: one token", T=1, KH=1, G=1, D=HEAD_DIM, BS=_FQR_PAGE, X=2, C=1),
    ]
    return dedup(cases)


def reference(**args):
    cos, sin = args["cos_sin"][args["pos"].long()].chunk(2, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]
    q, q_scale = neox(args["q"], cos, sin)
    k_rot, k_rot_scale = neox(args["k"], cos, sin)
    slots = args["slot_mapping"].long()
    keep = slots >= 0
    k = args["k"].double().clone()
    k_scale = k.abs()
    k[keep], k_scale[keep] = k_rot[keep], k_rot_scale[keep]
    key_cache = args["key_cache"].double().clone()
    value_cache = args["value_cache"].double().clone()
    kc_scale = key_cache.abs()
    pages, page_size, heads, dim = key_cache.shape
    key_cache.view(-1, heads, dim)[slots[keep]] = k_rot[keep]
    kc_scale.view(-1, heads, dim)[slots[keep]] = k_rot_scale[keep]
    value_cache.view(-1, heads, dim)[slots[keep]] = args["v"].double()[keep]
    return {"q": q, "k": k, "key_cache": key_cache, "value_cache": value_cache,
            "q:scale": q_scale, "k:scale": k_scale, "key_cache:scale": kc_scale}


def make_inputs(dims, dtype, gen, device):
    t, bs, x = dims["T"], dims["BS"], dims["X"]
    rows = t + dims["C"]
    pool = (t // bs + x) * bs
    slots = (torch.randperm(pool - bs, generator=gen, device=device) + bs)[:t].to(torch.int64)
    pad = t // 4
    if pad:
        slots[t - pad:] = -1
    return {"cos_sin": rope_table(rows, dims["D"], gen, device),
            "pos": batch_positions(t, rows, gen, device), "slot_mapping": slots}


REFERENCE = FileText(
    doc=(
        "Reference for fused_qk_rope_reshape_and_cache (astra-sglang, written), as SGLang's ROCm path calls it:\n"
        "q_out=q, k_out=k (in place), NeoX, flash layout [pages, page_size, KH, D], no FP8 scales, no SWA remap.\n"
        "\n"
        "q <- rope(q); for a token with slot s >= 0: k <- rope(k), key_cache[s // BS, s % BS] = rope(k),\n"
        "value_cache[s // BS, s % BS] = v. A padding token (s < 0) keeps its k unrotated and writes no cache row (the\n"
        "kernel skips the whole KV branch for it)."
    ),
    imports=("import torch",),
    functions=(neox, reference),
)

INPUTS = FileText(
    doc=(
        "Structured inputs for fused_qk_rope_reshape_and_cache (astra-sglang, written): the RoPE table, a batch's\n"
        "positions and its out_cache_loc (distinct slots outside the padded page 0; the trailing T//4 tokens are\n"
        "padding, slot -1, which the kernel skips)."
    ),
    imports=("import torch",),
    functions=(rope_table, batch_positions, make_inputs),
    blank_lines_before_functions=1,
)


ENTRY = CatalogEntry(
    short_name="fused_qk_rope_reshape_and_cache",
    op_id="attention.fused_qk_rope_reshape_and_cache",
    entry_point=f"{_FQR_MODULE}:fused_qk_rope_reshape_and_cache",
    kind="triton",
    signature=Signature(
        dims=[
            Dim(name="T", meaning="tokens (slot_mapping covers all of them)"),
            Dim(name="KH", meaning="KV heads (after TP)"),
            Dim(name="G", meaning="query heads per KV head (QH = KH * G)"),
            Dim(name="D", meaning="head dim (pinned: a power of two the kernel asserts)", min=HEAD_DIM,
                max=HEAD_DIM),
            Dim(name="BS", meaning="page size (pinned: a power-of-two constexpr)", min=_FQR_PAGE, max=_FQR_PAGE),
            Dim(name="X", meaning="cache pages beyond T // BS", min=2),
            Dim(name="C", meaning="RoPE table rows beyond T"),
        ],
        tensors=[
            TensorArg(name="q", role="inplace", shape=["T", "KH*G", "D"], dtype="{dtype}"),
            TensorArg(name="k", role="inplace", shape=["T", "KH", "D"], dtype="{dtype}"),
            TensorArg(name="v", role="input", shape=["T", "KH", "D"], dtype="{dtype}"),
            TensorArg(name="key_cache", role="inplace", shape=["T//BS+X", "BS", "KH", "D"], dtype="{dtype}"),
            TensorArg(name="value_cache", role="inplace", shape=["T//BS+X", "BS", "KH", "D"], dtype="{dtype}"),
            TensorArg(name="slot_mapping", role="input", shape=["T"], dtype="int64", align_bytes=8, generated=True),
            TensorArg(name="pos", role="input", shape=["T"], dtype="int64", align_bytes=8, generated=True),
            TensorArg(name="cos_sin", role="input", shape=["T+C", "D"], dtype="float32", generated=True),
        ],
        dtypes=["bfloat16", "float16"],
        relations=[
            "cos, sin = cos_sin[pos[t]].chunk(2) (D/2 frequencies, reused for both halves: NeoX)",
            "q[t] <- rope(q[t]) for every token",
            "slot s = slot_mapping[t] >= 0: k[t] <- rope(k[t]); key_cache[s//BS, s%BS] = rope(k[t]); "
            "value_cache[s//BS, s%BS] = v[t]",
            "s < 0 (padding): k[t] stays as it was, no cache row is written",
        ],
        returns=None,  # returns (q.view(T, QH*D), k, key_cache, value_cache): a reshaped view of q, unchecked
    ),
    reference=REFERENCE,
    inputs=INPUTS,
    shapes=_fqr_shapes,
    call=["q", "k", "v", "key_cache", "value_cache", "slot_mapping", "pos", "cos_sin", "None", "None", "True",
          "True", "q_out=q", "k_out=k", "output_zeros=False"],
    wrapper=f"{_FQR_MODULE}:fused_qk_rope_reshape_and_cache",
    callsite_modules=(_FQR_MODULE,),
    serving_sites={f"{_FQR_MODULE}:fused_qk_rope_reshape_and_cache": "the definition"},
    extra_sites=[
        CallSite(
            module="sglang.srt.layers.rotary_embedding.base", attr="fused_qk_rope_reshape_and_cache",
            binds="entry_point", target=f"{_FQR_MODULE}.fused_qk_rope_reshape_and_cache", same_function=True,
            reached_by_serving=False,
            note="read from source: imported under _is_hip only; RotaryEmbedding.forward_cuda on ROCm when "
            "use_fallback_kernel and fused_set_kv_buffer_arg is given (q_out=q, k_out=k, output_zeros=False). "
            "Not reached on CUDA: there the fused store is the JIT run_rope_store",
        ),
    ],
    notes=[
        "Triton kernel _fused_qk_rope_reshape_and_cache_kernel, one program per (token, q head); the group leader "
        "(q head % G == 0) also rotates/stores k and stores v; num_warps=1",
        "ROCm serving only (base.py imports it under _is_hip); extracted because it is a stand-alone Triton "
        "kernel of the same RoPE + KV-store function CUDA serves with the JIT run_rope_store",
    ],
)
