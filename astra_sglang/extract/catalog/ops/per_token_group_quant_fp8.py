"""per_token_group_quant_fp8: dynamic FP8 E4M3 quantization per token-group of 128 (JIT
``gemm/per_token_group_quant.cuh``), the activation side of DeepSeek-V3's block-wise FP8 GEMMs.
"""

from __future__ import annotations

from astra_sglang.contract.op import CallSite, Dim, ShapeCase, Signature, TensorArg
from astra_sglang.extract.catalog._fp8_quant import DTYPES, FP8, TOLERANCES, capped
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import case, decode_prefill, dedup

_GROUP_MODULE = "sglang.kernels.ops.quantization.per_token_group_quant"
# GROUP (below, written into reference.py with its comment-free line): DeepSeek-V3's weight_block_size
# [128, 128], so activations are quantized per 1x128 group.


def _group_shapes() -> list[ShapeCase]:
    """K of DeepSeek-V3's block-FP8 GEMMs (hidden 7168, q_lora 1536, kv_lora 512, MoE intermediate 2048 at
    EP8 / 256 at TP8, dense intermediate 18432/8); the MoE down GEMM quantizes T*top_k rows."""
    widths = [(7168, "DeepSeek-V3 hidden (q_a/kv_a/gate_up/experts w13)"), (1536, "DeepSeek-V3 q_lora (q_b)"),
              (512, "DeepSeek-V3 kv_lora (kv_b)"), (2048, "DeepSeek-V3 EP8 experts w2 (T*8 rows)"),
              (256, "DeepSeek-V3 TP8 experts w2 (T*8 rows)"), (2304, "DeepSeek-V3 TP8 dense down_proj")]
    return dedup([
        *(capped(c) for c in decode_prefill(({"H": w}, src) for w, src in widths)),
        case(["edge", "decode"], "edge: one token", T=1, H=7168),
        case(["edge"], "edge: one group per row", T=77, H=GROUP),
        case(["edge"], "edge: MoE down rows of a 1024-token batch at top-8, TP8", T=8192, H=256),
    ])


FP8_MAX = 448.0
GROUP = 128


def reference(**args):
    x = args["input"].float()
    t, h = x.shape
    g = x.reshape(t, h // GROUP, GROUP)
    amax = g.abs().amax(dim=-1, keepdim=True).clamp_min(1e-10)
    q = (g * (FP8_MAX / amax)).clamp(-FP8_MAX, FP8_MAX).reshape(t, h)
    return {"output_q": q, "output_s": (amax / FP8_MAX).reshape(t, h // GROUP)}


REFERENCE = FileText(
    doc=(
        "Reference for per_token_group_quant (astra-sglang, written): per 1x128 group absmax scaling.\n"
        "\n"
        "amax = max(max |x| over the group, 1e-10); scale = amax / 448 (row-major [T, H/128]);\n"
        "q = clamp(x * 448 / amax, -448, 448), rounded to fp8 by the checker (round to nearest even, saturating)."
    ),
    imports=("import torch",),
    constants=("FP8_MAX", "GROUP"),
    functions=(reference,),
)


ENTRY = CatalogEntry(
    short_name="per_token_group_quant_fp8",
    op_id="quantization.per_token_group_quant",
    entry_point=f"{_GROUP_MODULE}:per_token_group_quant",
    kind="cuda_jit",
    signature=Signature(
        dims=[Dim(name="T", meaning="rows (tokens, or tokens*top_k for the MoE down GEMM)"),
              Dim(name="H", meaning="row width = the GEMM's K", multiple_of=GROUP)],
        tensors=[
            TensorArg(name="input", role="input", shape=["T", "H"], dtype="{dtype}"),
            TensorArg(name="output_q", role="output", shape=["T", "H"], dtype="float8_e4m3fn"),
            TensorArg(name="output_s", role="output", shape=["T", f"H//{GROUP}"], dtype="float32", align_bytes=4),
        ],
        dtypes=list(DTYPES),
        relations=[f"output_s[t, j] = max(max_i |input[t, {GROUP}j + i]|, 1e-10) / 448 (row-major)",
                   f"output_q[t, {GROUP}j + i] = fp8_e4m3(clamp(input[t, {GROUP}j + i] / output_s[t, j]))"],
        returns=[],
    ),
    reference=REFERENCE,
    shapes=_group_shapes,
    call=["input", "output_q", "output_s"],
    builder=f"{_GROUP_MODULE}:_jit_module",
    # (in, out, group, ue8m0, row_major, aligned, fuse_silu_and_mul, masked, use_pdl): the flat row-major layout
    builder_args={d: (f"torch.{d}", "torch.float8_e4m3fn", GROUP, False, True, True, False, False, True)
                  for d in DTYPES},
    entry_export="per_token_group_quant",
    tolerances=TOLERANCES,
    aliases=("sglang_per_token_group_quant_fp8",),
    callsite_modules=(_GROUP_MODULE,),
    serving_sites={f"{_GROUP_MODULE}:per_token_group_quant": "the JIT entry; reached through the callers below"},
    extra_sites=[
        CallSite(
            module=FP8, attr="sglang_per_token_group_quant_fp8", binds="caller", target=None, same_function=False,
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
