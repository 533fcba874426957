"""Dynamic FP8 E4M3 activation quantization, the activation side of SGLang's FP8 GEMMs on CUDA: per token
(JIT ``gemm/per_token_quant_fp8.cuh``, w8a8 FP8 with per-channel weights) and per token-group of 128
(JIT ``gemm/per_token_group_quant.cuh``, DeepSeek-V3's block-wise FP8).

Per row: scale = max|x| / 448, q = fp8(clamp(x / scale, -448, 448)). SGLang's Python ``sglang_per_token_quant_fp8``
(``kernels/ops/quantization/fp8_kernel.py``) is not a Triton kernel: on CUDA it allocates the outputs and calls
this JIT kernel, so it is this op, not another one.
"""

from __future__ import annotations

from astra_sglang.contract.op import CallSite, Dim, KernelFinding, ShapeCase, Signature, TensorArg, Tolerance
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.shapes import MODELS, MOE_MODELS, case, decode_prefill, dedup, model_widths

_MODULE = "sglang.kernels.ops.quantization.per_token_quant_fp8"
_FP8 = "sglang.kernels.ops.quantization.fp8_kernel"
_DTYPES = ("bfloat16", "float16", "float32")
# H200: 132 SMs; the kernel switches from one CTA per token to one warp per token at 132 * 2 * 8 tokens
_WARP_KERNEL_T = 132 * 2 * 8
_DOWN_MODELS = ("LLaMA-3-8B", "LLaMA-3-70B", "Qwen2.5-7B", "Qwen2.5-72B", "Mixtral-8x7B")

# The scale is max|x| (exact) / 448 in float32: fast-math division is within 2 ulp (2.4e-7), so rtol 1e-5 as
# for any float32 output; atol 0 because scales of tiny inputs are ~1e-5 themselves. The fp8 output gets the
# checker's one-fp8-ulp allowance (checker._FP8_MANTISSA): a last-bit difference in the scale moves a value
# that sits on an fp8 rounding midpoint to the neighbouring code, which is as correct.
_TOLERANCES = {d: Tolerance(atol=0.0, rtol=1e-5) for d in _DTYPES}


def _capped(c: ShapeCase) -> ShapeCase:
    """Prefill T halved until T*H <= 2^26 elements (a 16384-token chunk of a 29568-wide row is 0.5 G)."""
    t = c.dims["T"]
    while t * c.dims["H"] > 1 << 26 and t > 512:
        t //= 2
    return c if t == c.dims["T"] else ShapeCase(dims={**c.dims, "T": t}, tags=c.tags, source=f"{c.source} (T capped)")


def _shapes() -> list[ShapeCase]:
    """K of the FP8 GEMMs the quantized activation feeds: hidden (qkv/gate_up) and intermediate/TP (down)."""
    hidden: dict[int, str] = {}
    for m in MODELS:
        hidden.setdefault(m.hidden, f"{m.name} hidden")
    for moe in MOE_MODELS:
        hidden.setdefault(moe.hidden, f"{moe.name} hidden")
    down = model_widths(lambda m, tp: m.intermediate // tp if m.name in _DOWN_MODELS and tp in (1, 8) else None)
    widths = [(w, src) for w, src in hidden.items()] + [(w, f"{src} down_proj") for w, src in down
                                                       if w not in hidden]
    return dedup([
        *(_capped(c) for c in decode_prefill(({"H": w}, src) for w, src in widths)),
        case(["edge", "decode"], "edge: one token", T=1, H=4096),
        case(["edge"], f"edge: {_WARP_KERNEL_T - 1} tokens, the last one-CTA-per-token size on an H200",
             T=_WARP_KERNEL_T - 1, H=4096),
        case(["edge"], f"edge: {_WARP_KERNEL_T} tokens, the first one-warp-per-token size on an H200",
             T=_WARP_KERNEL_T, H=4096),
        case(["edge"], "edge: H a multiple of 4 but not of the 16-byte vector (4-wide path)", T=77, H=1004),
        case(["edge"], "edge: narrowest row", T=33, H=4),
    ])


_REFERENCE = '''"""Reference for per_token_quant_fp8 (astra-sglang, written): float32 per-row absmax scaling to FP8 E4M3.

scale = max|x| / 448 per row; q = clamp(x / scale, -448, 448) rounded to fp8 by the checker (round to nearest
even, as the kernel's cast). A row of zeros has scale 0 and q = 0 (nothing to scale)."""

import torch

FP8_MAX = 448.0


def reference(**args):
    x = args["input"].float()
    scale = x.abs().amax(dim=-1, keepdim=True) / FP8_MAX
    inv = torch.where(scale == 0, torch.zeros_like(scale), 1.0 / scale)
    q = (x * inv).clamp(-FP8_MAX, FP8_MAX)
    return {"output_q": q, "output_s": scale}
'''

PER_TOKEN_QUANT_FP8 = CatalogEntry(
    short_name="per_token_quant_fp8",
    op_id="quantization.sgl_per_token_quant_fp8",
    entry_point=f"{_MODULE}:per_token_quant_fp8",
    kind="cuda_jit",
    signature=Signature(
        dims=[Dim(name="T", meaning="tokens (rows)"),
              Dim(name="H", meaning="row width = the FP8 GEMM's K", multiple_of=4)],
        tensors=[
            TensorArg(name="input", role="input", shape=["T", "H"], dtype="{dtype}"),
            TensorArg(name="output_q", role="output", shape=["T", "H"], dtype="float8_e4m3fn"),
            TensorArg(name="output_s", role="output", shape=["T", "1"], dtype="float32", align_bytes=4),
        ],
        dtypes=list(_DTYPES),
        relations=["output_s[t] = max_i |input[t, i]| / 448",
                   "output_q[t, i] = fp8_e4m3(clamp(input[t, i] / output_s[t], -448, 448))",
                   "H % 4 == 0 (the kernel's check)"],
        returns=[],
    ),
    reference=_REFERENCE,
    shapes=_shapes,
    call=["input", "output_q", "output_s"],
    builder=f"{_MODULE}:_jit_per_token_quant_fp8_module",
    builder_args={d: (f"torch.{d}",) for d in _DTYPES},
    entry_export="per_token_quant_fp8",
    tolerances=_TOLERANCES,
    aliases=("sgl_per_token_quant_fp8", "sglang_per_token_quant_fp8"),
    callsite_modules=(_MODULE, "sglang.kernels.ops.diffusion.gemm.flux3_fp8_prims_ts"),
    serving_sites={
        f"{_MODULE}:per_token_quant_fp8": "the JIT wrapper (a registered custom op), reached through "
        "sglang.kernels.ops.quantization:sgl_per_token_quant_fp8 (the registry's JIT backend) below",
        "sglang.kernels.ops.diffusion.gemm.flux3_fp8_prims_ts:per_token_quant_fp8": "diffusion FLUX FP8 GEMM prims",
    },
    extra_sites=[
        CallSite(
            module=_FP8, attr="sglang_per_token_quant_fp8", binds="caller", target=None, same_function=False,
            reached_by_serving=True,
            note="read from source (CUDA-only import of sgl_per_token_quant_fp8): allocates output_q [T, H] fp8 and "
            "output_s [T, 1] and calls this kernel; used by sglang.srt.layers.quantization.fp8_utils:"
            "apply_fp8_linear for dynamic activation scales on CUDA (no input_scale), and by "
            "sglang_per_token_group_quant_fp8 when group_size == H on a 2-D input",
        ),
        CallSite(
            module=_FP8, attr="scaled_fp8_quant", binds="caller", target=None, same_function=False,
            reached_by_serving=True,
            note="read from source: CUDA scaled_fp8_quant(use_per_token_if_dynamic=True) (compressed-tensors w8a8 "
            "FP8, dual_gemm, Qwen3.5); with num_token_padding it passes more output rows than input rows, whose "
            "tail the kernel leaves unwritten (not this contract's shapes)",
        ),
    ],
    notes=[
        "two kernels on the H200: T < 2112 one CTA per token, else one warp per token (sm_count * 2 * 8)",
        "built with --use_fast_math and named 'fast_math' on sm_90 (SGLang's builder branches on the arch)",
    ],
    findings=[KernelFinding(distribution="zeros", why=(
        "confirmed on the H200 (2026-12-01): an all-zero row on the one-CTA-per-token kernel (T < 2112 there: "
        "decode and small prefill) gives q = 448 with scale 0. That kernel computes scale_inv = 1/scale without "
        "the warp kernel's zero guard (0 * inf = NaN, which fminf/fmaxf clamp to 448); the warp kernel and this "
        "reference give q = 0. q * scale is 0 either way, so an fp8 GEMM downstream sees the same values."))],
)


_GROUP_MODULE = "sglang.kernels.ops.quantization.per_token_group_quant"
_GROUP = 128  # DeepSeek-V3 weight_block_size [128, 128]: activations are quantized per 1x128 group


def _group_shapes() -> list[ShapeCase]:
    """K of DeepSeek-V3's block-FP8 GEMMs (hidden 7168, q_lora 1536, kv_lora 512, MoE intermediate 2048 at
    EP8 / 256 at TP8, dense intermediate 18432/8); the MoE down GEMM quantizes T*top_k rows."""
    widths = [(7168, "DeepSeek-V3 hidden (q_a/kv_a/gate_up/experts w13)"), (1536, "DeepSeek-V3 q_lora (q_b)"),
              (512, "DeepSeek-V3 kv_lora (kv_b)"), (2048, "DeepSeek-V3 EP8 experts w2 (T*8 rows)"),
              (256, "DeepSeek-V3 TP8 experts w2 (T*8 rows)"), (2304, "DeepSeek-V3 TP8 dense down_proj")]
    return dedup([
        *(_capped(c) for c in decode_prefill(({"H": w}, src) for w, src in widths)),
        case(["edge", "decode"], "edge: one token", T=1, H=7168),
        case(["edge"], "edge: one group per row", T=77, H=_GROUP),
        case(["edge"], "edge: MoE down rows of a 1024-token batch at top-8, TP8", T=8192, H=256),
    ])


_GROUP_REFERENCE = f'''"""Reference for per_token_group_quant (astra-sglang, written): per 1x{_GROUP} group absmax scaling.

amax = max(max |x| over the group, 1e-10); scale = amax / 448 (row-major [T, H/{_GROUP}]);
q = clamp(x * 448 / amax, -448, 448), rounded to fp8 by the checker (round to nearest even, saturating)."""

import torch

FP8_MAX = 448.0
GROUP = {_GROUP}


def reference(**args):
    x = args["input"].float()
    t, h = x.shape
    g = x.reshape(t, h // GROUP, GROUP)
    amax = g.abs().amax(dim=-1, keepdim=True).clamp_min(1e-10)
    q = (g * (FP8_MAX / amax)).clamp(-FP8_MAX, FP8_MAX).reshape(t, h)
    return {{"output_q": q, "output_s": (amax / FP8_MAX).reshape(t, h // GROUP)}}
'''

PER_TOKEN_GROUP_QUANT_FP8 = CatalogEntry(
    short_name="per_token_group_quant_fp8",
    op_id="quantization.per_token_group_quant",
    entry_point=f"{_GROUP_MODULE}:per_token_group_quant",
    kind="cuda_jit",
    signature=Signature(
        dims=[Dim(name="T", meaning="rows (tokens, or tokens*top_k for the MoE down GEMM)"),
              Dim(name="H", meaning="row width = the GEMM's K", multiple_of=_GROUP)],
        tensors=[
            TensorArg(name="input", role="input", shape=["T", "H"], dtype="{dtype}"),
            TensorArg(name="output_q", role="output", shape=["T", "H"], dtype="float8_e4m3fn"),
            TensorArg(name="output_s", role="output", shape=["T", f"H//{_GROUP}"], dtype="float32", align_bytes=4),
        ],
        dtypes=list(_DTYPES),
        relations=[f"output_s[t, j] = max(max_i |input[t, {_GROUP}j + i]|, 1e-10) / 448 (row-major)",
                   f"output_q[t, {_GROUP}j + i] = fp8_e4m3(clamp(input[t, {_GROUP}j + i] / output_s[t, j]))"],
        returns=[],
    ),
    reference=_GROUP_REFERENCE,
    shapes=_group_shapes,
    call=["input", "output_q", "output_s"],
    builder=f"{_GROUP_MODULE}:_jit_module",
    # (in, out, group, ue8m0, row_major, aligned, fuse_silu_and_mul, masked, use_pdl): the flat row-major layout
    builder_args={d: (f"torch.{d}", "torch.float8_e4m3fn", _GROUP, False, True, True, False, False, True)
                  for d in _DTYPES},
    entry_export="per_token_group_quant",
    tolerances=_TOLERANCES,
    aliases=("sglang_per_token_group_quant_fp8",),
    callsite_modules=(_GROUP_MODULE,),
    serving_sites={f"{_GROUP_MODULE}:per_token_group_quant": "the JIT entry; reached through the callers below"},
    extra_sites=[
        CallSite(
            module=_FP8, attr="sglang_per_token_group_quant_fp8", binds="caller", target=None, same_function=False,
            reached_by_serving=True,
            note="read from source (CUDA): allocates row-major fp32 scales unless column_major_scales and calls "
            "_run_per_token_group_quant_8bit_kernel -> per_token_group_quant; this folder is its default "
            "(row-major, no ue8m0, no fused SiLU) as invoke_fused_moe_kernel calls it for block-FP8 MoE "
            "(DeepSeek-V3 on the Triton MoE path); the block-FP8 linear path with DeepGEMM asks for column-major "
            "TMA-aligned or ue8m0 scales: other template variants",
        ),
    ],
    notes=[
        "pinned variant: PerTokenGroupQuantFlatKernel<T, fp8_e4m3, 128, ue8m0=false, row_major=true, aligned=true, "
        "fuse_silu_and_mul=false, use_pdl=true>, built with --use_fast_math",
        "the kernel scales by 448 / amax (fast-math division) and stores amax * (1/448): both within 2 float32 ulp "
        "of the reference's; fp8 outputs get the checker's one-ulp allowance",
    ],
)

ENTRIES = [PER_TOKEN_QUANT_FP8, PER_TOKEN_GROUP_QUANT_FP8]
