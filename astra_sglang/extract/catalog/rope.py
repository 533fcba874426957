"""RoPE on the serving hot path: the CUDA JIT kernel LLaMA/Qwen use on CUDA, the fused RoPE + KV store (Triton,
ROCm's path) and the interleaved M-RoPE cos/sin gather (Triton, Qwen3-VL).

The default CUDA path, for a plain LLaMA/Qwen2 config (head_size in {64, 128, 256, 512}, is_neox_style=True):
``RotaryEmbedding.forward_cuda`` (srt/layers/rotary_embedding/base.py) with ``use_fallback_kernel`` False calls
``apply_rope_with_cos_sin_cache_inplace`` (kernels/ops/attention/rope.py), which, without fused KV-store
arguments (LLaMA's ``self.rotary_emb(positions, q, k)`` passes none), calls ``apply_rope_inplace`` -> the JIT
module ``fused_rope`` built from ``elementwise/rope.cuh`` as ``FusedRopeKernel<is_neox, rope_dim, use_pdl,
dtype, q_dtype>::run``. Not sgl_kernel, not FlashInfer: that JIT kernel is what is extracted here.

NeoX rotation over the first rope_dim lanes, halves x = h[:R/2], y = h[R/2:], per position p with
cos_sin_cache[p] = [cos(p*f_0..f_{R/2-1}), sin(...)]: x' = x cos - y sin, y' = x sin + y cos.
"""

from __future__ import annotations

from astra_sglang.contract.op import (
    CallSite,
    Dim,
    ShapeCase,
    Signature,
    TensorArg,
)
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.shapes import DECODE_T, PREFILL_T, case, dedup, head_pairs

_ROPE_MODULE = "sglang.kernels.ops.attention.rope"
_HEAD_DIM = 128
MAX_ELEMS = 1 << 26

# The cos/sin table and the positions of a simulated batch, shared by the RoPE ops' inputs.py: a few decode
# requests at random lengths within the context, then one prefill chunk at consecutive positions after a
# random prefix. The table has T + C rows (C: context beyond the batch), so every legal T, C is a valid batch.
_BATCH = '''
def rope_table(rows, rope_dim, gen, device, base=500000.0):
    """cat(cos, sin) of p * base^(-2i/rope_dim), float32, as RotaryEmbedding._compute_cos_sin_cache builds it
    (LLaMA-3's base; the kernel reads the table, so the base only sets realistic frequencies)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, rope_dim, 2, dtype=torch.float64, device=device) / rope_dim))
    freqs = torch.arange(rows, dtype=torch.float64, device=device)[:, None] * inv_freq[None, :]
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(torch.float32)


def batch_positions(tokens, rows, gen, device):
    """Positions of a batch: up to 3/8 of the tokens are decode requests at random positions (their current
    length), the rest one prefill chunk at consecutive positions after a random cached prefix."""
    decode = min(tokens, max(1 if tokens < 4 else 0, (3 * tokens) // 8))
    chunk = tokens - decode
    out = [torch.randint(0, rows, (decode,), generator=gen, device=device)]
    if chunk:
        start = int(torch.randint(0, rows - chunk + 1, (1,), generator=gen, device=device))
        out.append(torch.arange(start, start + chunk, device=device))
    return torch.cat(out).to(torch.int64)
'''

_ROPE_SCALE = '''

def neox(h, cos, sin):
    """NeoX rotation in float64 and the size of its terms (the rounding of any order scales with them)."""
    h = h.double()
    half = h.shape[-1] // 2
    x, y = h[..., :half], h[..., half:]
    c, s = cos.double(), sin.double()
    out = torch.cat((x * c - y * s, x * s + y * c), dim=-1)
    scale = torch.cat(((x * c).abs() + (y * s).abs(), (x * s).abs() + (y * c).abs()), dim=-1)
    return out, scale
'''


# -- the default CUDA path: JIT FusedRopeKernel::run ---------------------------------------------------------

_FUSED_ROPE_REFERENCE = '''"""Reference for fused_rope (astra-sglang, written): NeoX RoPE of q and k in place, float64.

Restates RotaryEmbedding.forward_native for rotary_dim == head_size: cos, sin = cos_sin_cache[positions].chunk(2)
and q, k = apply_rotary_emb(q/k, cos, sin, is_neox_style=True) per head."""

import torch
''' + _ROPE_SCALE + '''

def reference(**args):
    cos, sin = args["cos_sin_cache"][args["positions"].long()].chunk(2, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]
    q, q_scale = neox(args["q"], cos, sin)
    k, k_scale = neox(args["k"], cos, sin)
    return {"q": q, "k": k, "q:scale": q_scale, "k:scale": k_scale}
'''

_FUSED_ROPE_INPUTS = '''"""Structured inputs for fused_rope (astra-sglang, written): the RoPE table and a batch's positions."""

import torch
''' + _BATCH + '''

def make_inputs(dims, dtype, gen, device):
    rows = dims["T"] + dims["C"]
    return {"cos_sin_cache": rope_table(rows, dims["D"], gen, device),
            "positions": batch_positions(dims["T"], rows, gen, device)}
'''


def _fused_rope_shapes() -> list[ShapeCase]:
    cases: list[ShapeCase] = []
    for i, (nq, nk, src) in enumerate(head_pairs()):
        t_dec, t_pre = DECODE_T[i % len(DECODE_T)], PREFILL_T[i % len(PREFILL_T)]
        cases.append(case(["decode"], f"{src} decode", T=t_dec, NQ=nq, NK=nk, D=_HEAD_DIM, C=4096))
        if t_pre * (nq + nk) * _HEAD_DIM <= MAX_ELEMS:
            cases.append(case(["prefill"], f"{src} prefill", T=t_pre, NQ=nq, NK=nk, D=_HEAD_DIM, C=4096))
    cases += [
        case(["edge", "decode"], "edge: one token", T=1, NQ=32, NK=8, D=_HEAD_DIM, C=8191),
        case(["edge"], "edge: MHA (NQ == NK), odd token count", T=77, NQ=5, NK=5, D=_HEAD_DIM, C=100),
        case(["edge", "prefill"], "edge: long context table (128k positions)", T=1024, NQ=32, NK=8, D=_HEAD_DIM,
             C=130048),
    ]
    return dedup(cases)


FUSED_ROPE = CatalogEntry(
    short_name="fused_rope",
    op_id=f"{_ROPE_MODULE}:apply_rope_inplace",
    entry_point=f"{_ROPE_MODULE}:apply_rope_inplace",
    kind="cuda_jit",
    signature=Signature(
        dims=[
            Dim(name="T", meaning="tokens"),
            Dim(name="NQ", meaning="query heads (after TP)"),
            Dim(name="NK", meaning="KV heads (after TP)"),
            Dim(name="D", meaning="head dim = rope_dim (pinned: a template argument)", min=_HEAD_DIM,
                max=_HEAD_DIM),
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
            f"the build is specialised to rope_dim = head_dim = {_HEAD_DIM}, is_neox=True, use_pdl=True (sm_90)",
        ],
        returns=[],
    ),
    reference=_FUSED_ROPE_REFERENCE,
    inputs=_FUSED_ROPE_INPUTS,
    shapes=_fused_rope_shapes,
    call=["q", "k", "cos_sin_cache", "positions"],
    builder=f"{_ROPE_MODULE}:_jit_fused_rope_module",
    builder_args={"bfloat16": (True, _HEAD_DIM, "torch.bfloat16", "torch.bfloat16"),
                  "float16": (True, _HEAD_DIM, "torch.float16", "torch.float16")},
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


# -- ROCm's fused RoPE + KV-cache store (Triton) ---------------------------------------------------------

_FQR_MODULE = "sglang.kernels.ops.attention.fused_qk_rope_reshape_and_cache"
_FQR_PAGE = 16

_FQR_REFERENCE = '''"""Reference for fused_qk_rope_reshape_and_cache (astra-sglang, written), as SGLang's ROCm path calls it:
q_out=q, k_out=k (in place), NeoX, flash layout [pages, page_size, KH, D], no FP8 scales, no SWA remap.

q <- rope(q); for a token with slot s >= 0: k <- rope(k), key_cache[s // BS, s % BS] = rope(k),
value_cache[s // BS, s % BS] = v. A padding token (s < 0) keeps its k unrotated and writes no cache row (the
kernel skips the whole KV branch for it)."""

import torch
''' + _ROPE_SCALE + '''

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
'''

_FQR_INPUTS = '''"""Structured inputs for fused_qk_rope_reshape_and_cache (astra-sglang, written): the RoPE table, a batch's
positions and its out_cache_loc (distinct slots outside the padded page 0; the trailing T//4 tokens are
padding, slot -1, which the kernel skips)."""

import torch
''' + _BATCH + '''

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
'''


def _fqr_shapes() -> list[ShapeCase]:
    cases: list[ShapeCase] = []
    for i, (nq, nk, src) in enumerate(head_pairs()):
        for tag, ts in (("decode", DECODE_T), ("prefill", PREFILL_T)):
            t = ts[i % len(ts)]
            dims = {"T": t, "KH": nk, "G": nq // nk, "D": _HEAD_DIM, "BS": _FQR_PAGE, "X": t // _FQR_PAGE + 2,
                    "C": 4096}
            if max(t * nq, 2 * t * nk + 3 * _FQR_PAGE * nk) * _HEAD_DIM <= MAX_ELEMS:
                cases.append(case([tag], f"{src} {tag}", **dims))
    cases += [
        case(["edge", "decode"], "edge: one token", T=1, KH=8, G=4, D=_HEAD_DIM, BS=_FQR_PAGE, X=64, C=8191),
        case(["edge"], "edge: MHA (G = 1), odd token count", T=45, KH=5, G=1, D=_HEAD_DIM, BS=_FQR_PAGE, X=6,
             C=100),
        # the CPU suite (TRITON_INTERPRET=1 runs one program per (token, q head)): few programs, still a padded
        # token (T // 4 of them), GQA and MHA, a slot past the first page
        case(["test"], "CPU: GQA, one padded token", T=4, KH=1, G=2, D=_HEAD_DIM, BS=_FQR_PAGE, X=2, C=3),
        case(["test"], "CPU: MHA, two KV heads", T=3, KH=2, G=1, D=_HEAD_DIM, BS=_FQR_PAGE, X=2, C=5),
        case(["test", "decode"], "CPU: one token", T=1, KH=1, G=1, D=_HEAD_DIM, BS=_FQR_PAGE, X=2, C=1),
    ]
    return dedup(cases)


FUSED_QK_ROPE_RESHAPE_AND_CACHE = CatalogEntry(
    short_name="fused_qk_rope_reshape_and_cache",
    op_id="attention.fused_qk_rope_reshape_and_cache",
    entry_point=f"{_FQR_MODULE}:fused_qk_rope_reshape_and_cache",
    kind="triton",
    signature=Signature(
        dims=[
            Dim(name="T", meaning="tokens (slot_mapping covers all of them)"),
            Dim(name="KH", meaning="KV heads (after TP)"),
            Dim(name="G", meaning="query heads per KV head (QH = KH * G)"),
            Dim(name="D", meaning="head dim (pinned: a power of two the kernel asserts)", min=_HEAD_DIM,
                max=_HEAD_DIM),
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
    reference=_FQR_REFERENCE,
    inputs=_FQR_INPUTS,
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


# -- interleaved M-RoPE cos/sin gather (Triton) -----------------------------------------------------------

_MROPE_MODULE = "sglang.kernels.ops.attention.mrope"
_MROPE_SECTION = [24, 20, 20]  # Qwen3-VL's rope_scaling.mrope_section (head_dim 128, rotary_dim 128)
_MROPE_D = sum(_MROPE_SECTION)

_MROPE_REFERENCE = f'''"""Reference for apply_interleaved_rope_triton (astra-sglang, written; restates SGLang's
apply_interleaved_rope in srt/layers/rotary_embedding/mrope.py) for mrope_section = {_MROPE_SECTION}.

Lane d of the output takes the temporal axis x[0], except lanes d % 3 == 1 below 3*section[1] (height, x[1])
and lanes d % 3 == 2 below 3*section[2] (width, x[2]). A gather: exact."""

SECTION = {_MROPE_SECTION}


def reference(**args):
    x = args["x"]
    out = x[0].clone()
    out[..., 1 : SECTION[1] * 3 : 3] = x[1, ..., 1 : SECTION[1] * 3 : 3]
    out[..., 2 : SECTION[2] * 3 : 3] = x[2, ..., 2 : SECTION[2] * 3 : 3]
    return {{"out": out}}
'''


def _mrope_shapes() -> list[ShapeCase]:
    cases = [case(["decode"], "Qwen3-VL decode", S=t, D=_MROPE_D) for t in DECODE_T]
    cases += [case(["prefill"], "Qwen3-VL prefill (image + text tokens)", S=t, D=_MROPE_D) for t in PREFILL_T]
    cases += [
        case(["edge"], "edge: a partial BLOCK_S tile", S=65, D=_MROPE_D),
        case(["edge", "prefill"], "edge: long video prompt", S=65536, D=_MROPE_D),
    ]
    return dedup(cases)


APPLY_INTERLEAVED_ROPE = CatalogEntry(
    short_name="apply_interleaved_rope",
    op_id="attention.apply_interleaved_rope_triton",
    entry_point=f"{_MROPE_MODULE}:apply_interleaved_rope_triton",
    kind="triton",
    signature=Signature(
        dims=[
            Dim(name="S", meaning="tokens"),
            Dim(name="D", meaning=f"rotary_dim // 2 (pinned to sum(mrope_section) = {_MROPE_D})", min=_MROPE_D,
                max=_MROPE_D),
        ],
        tensors=[
            TensorArg(name="x", role="input", shape=["3", "S", "D"], dtype="{dtype}"),
            TensorArg(name="out", role="output", shape=["S", "D"], dtype="{dtype}"),
        ],
        dtypes=["bfloat16", "float16", "float32"],
        relations=[
            "x = the cos (or sin) half of cos_sin_cache[positions] for the 3 M-RoPE axes (t, h, w)",
            f"mrope_section = {_MROPE_SECTION} (Qwen3-VL), passed as a literal",
            "out[s, d] = x[1, s, d] if d % 3 == 1 and d < 3*section[1]; x[2, s, d] if d % 3 == 2 and "
            "d < 3*section[2]; else x[0, s, d]",
        ],
        returns=["out"],
    ),
    reference=_MROPE_REFERENCE,
    shapes=_mrope_shapes,
    call=["x", repr(_MROPE_SECTION)],
    wrapper=f"{_MROPE_MODULE}:apply_interleaved_rope_triton",
    forward_native="sglang.srt.layers.rotary_embedding.mrope:apply_interleaved_rope",
    aliases=("apply_interleaved_rope_triton",),
    callsite_modules=(_MROPE_MODULE, "sglang.srt.layers.rotary_embedding.mrope"),
    serving_sites={
        f"{_MROPE_MODULE}:apply_interleaved_rope_triton": "the definition",
        "sglang.srt.layers.rotary_embedding.mrope:apply_interleaved_rope_triton": "MRotaryEmbedding."
        "get_cos_sin_with_position for 2-D positions with mrope_interleaved when both attention backends "
        "support Triton (called for cos and for sin); reached by callers that precompute position_cos/sin "
        "(qsa_indexer, dflash, the NPU paths of llama/glm4_moe/qwen3_5); MRotaryEmbedding.forward_cuda itself "
        "uses triton_mrope_fused instead",
    },
    notes=["Triton kernel apply_interleaved_rope_kernel on grid (cdiv(S, 64), cdiv(D, 128)); the wrapper makes x "
           "contiguous (SGLang passes the cos/sin chunk view of cos_sin_cache[positions])"],
)

ENTRIES = [FUSED_ROPE, FUSED_QK_ROPE_RESHAPE_AND_CACHE, APPLY_INTERLEAVED_ROPE]
