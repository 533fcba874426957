"""per_token_quant_fp8: dynamic FP8 E4M3 quantization per token (JIT ``gemm/per_token_quant_fp8.cuh``),
the activation side of w8a8 FP8 GEMMs with per-channel weights.
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import CallSite, Dim, KernelFinding, ShapeCase, Signature, TensorArg
from astra_sglang.extract.catalog._fp8_quant import DTYPES, FP8, TOLERANCES, capped
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import MODELS, MOE_MODELS, case, decode_prefill, dedup, model_widths

_MODULE = "sglang.kernels.ops.quantization.per_token_quant_fp8"

_DOWN_MODELS = ("LLaMA-3-8B", "LLaMA-3-70B", "Qwen2.5-7B", "Qwen2.5-72B", "Mixtral-8x7B")


# H200: 132 SMs; the kernel switches from one CTA per token to one warp per token at 132 * 2 * 8 tokens
_WARP_KERNEL_T = 132 * 2 * 8


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
        *(capped(c) for c in decode_prefill(({"H": w}, src) for w, src in widths)),
        case(["edge", "decode"], "edge: one token", T=1, H=4096),
        case(["edge"], f"edge: {_WARP_KERNEL_T - 1} tokens, the last one-CTA-per-token size on an H200",
             T=_WARP_KERNEL_T - 1, H=4096),
        case(["edge"], f"edge: {_WARP_KERNEL_T} tokens, the first one-warp-per-token size on an H200",
             T=_WARP_KERNEL_T, H=4096),
        case(["edge"], "edge: H a multiple of 4 but not of the 16-byte vector (4-wide path)", T=77, H=1004),
        case(["edge"], "edge: narrowest row", T=33, H=4),
    ])


FP8_MAX = 448.0


def reference(**args):
    x = args["input"].float()
    scale = x.abs().amax(dim=-1, keepdim=True) / FP8_MAX
    inv = torch.where(scale == 0, torch.zeros_like(scale), 1.0 / scale)
    q = (x * inv).clamp(-FP8_MAX, FP8_MAX)
    return {"output_q": q, "output_s": scale}


REFERENCE = FileText(
    doc=(
        "Reference for per_token_quant_fp8 (astra-sglang, written): float32 per-row absmax scaling to FP8 E4M3.\n"
        "\n"
        "scale = max|x| / 448 per row; q = clamp(x / scale, -448, 448) rounded to fp8 by the checker (round to nearest\n"
        "even, as the kernel's cast). A row of zeros has scale 0 and q = 0 (nothing to scale)."
    ),
    imports=("import torch",),
    constants=("FP8_MAX",),
    functions=(reference,),
)


ENTRY = CatalogEntry(
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
        dtypes=list(DTYPES),
        relations=["output_s[t] = max_i |input[t, i]| / 448",
                   "output_q[t, i] = fp8_e4m3(clamp(input[t, i] / output_s[t], -448, 448))",
                   "H % 4 == 0 (the kernel's check)"],
        returns=[],
    ),
    reference=REFERENCE,
    shapes=_shapes,
    call=["input", "output_q", "output_s"],
    builder=f"{_MODULE}:_jit_per_token_quant_fp8_module",
    builder_args={d: (f"torch.{d}",) for d in DTYPES},
    entry_export="per_token_quant_fp8",
    tolerances=TOLERANCES,
    aliases=("sgl_per_token_quant_fp8", "sglang_per_token_quant_fp8"),
    callsite_modules=(_MODULE, "sglang.kernels.ops.diffusion.gemm.flux3_fp8_prims_ts"),
    serving_sites={
        f"{_MODULE}:per_token_quant_fp8": "the JIT wrapper (a registered custom op), reached through "
        "sglang.kernels.ops.quantization:sgl_per_token_quant_fp8 (the registry's JIT backend) below",
        "sglang.kernels.ops.diffusion.gemm.flux3_fp8_prims_ts:per_token_quant_fp8": "diffusion FLUX FP8 GEMM prims",
    },
    extra_sites=[
        CallSite(
            module=FP8, attr="sglang_per_token_quant_fp8", binds="caller", target=None, same_function=False,
            reached_by_serving=True,
            note="read from source (CUDA-only import of sgl_per_token_quant_fp8): allocates output_q [T, H] fp8 and "
            "output_s [T, 1] and calls this kernel; used by sglang.srt.layers.quantization.fp8_utils:"
            "apply_fp8_linear for dynamic activation scales on CUDA (no input_scale), and by "
            "sglang_per_token_group_quant_fp8 when group_size == H on a 2-D input",
        ),
        CallSite(
            module=FP8, attr="scaled_fp8_quant", binds="caller", target=None, same_function=False,
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
