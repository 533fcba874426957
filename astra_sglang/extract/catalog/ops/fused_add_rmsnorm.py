"""fused_add_rmsnorm: JIT ``elementwise/fused_add_rmsnorm.cuh``; the serving default is FlashInfer's norm.cuh.

In place: residual <- input + residual; input <- rmsnorm(residual) * weight. SGLang's JIT kernel refuses
hidden > 8192 on sm_90 (16-byte vectors, one CTA of <= 1024 threads); RMSNorm.forward_cuda calls it only
with cast_x_before_out_mul=True and otherwise serves with sgl_kernel.fused_add_rmsnorm (FlashInfer).
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import (
    CallSite,
    Dim,
    ScalarArg,
    ServeRule,
    ShapeCase,
    Signature,
    TensorArg,
    hook_target,
    op_id_of,
)
from astra_sglang.extract.catalog.base import CatalogEntry, FlashInferBaseline
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import DECODE_T, MODELS, PREFILL_T, case, dedup

_ENTRY = "sglang.kernels.ops.layernorm.norm:fused_add_rmsnorm"
_JIT_MAX_H = 8192
# sglang 0.5.23, RMSNorm.forward_cuda: `elif residual is not None:` / `if self.cast_x_before_out_mul:` ... `else:`
# `fused_add_rmsnorm(x, residual, self.weight.data, self.variance_epsilon)` (the sgl_kernel import at line 102)
_SERVED_AT = "sglang/srt/layers/layernorm.py:628"


def _shapes() -> list[ShapeCase]:
    hidden = list(dict.fromkeys(m.hidden for m in MODELS))
    cases = [
        case(["paper"], "Astra paper", T=256, H=4096),
        case(["paper", "unsupported_by_sglang_jit"], "Astra paper (H > 8192: SGLang's JIT refuses)", T=128, H=11008),
        case(["paper"], "Astra paper", T=1024, H=4096),
        case(["paper", "unsupported_by_sglang_jit"], "Astra paper (H > 8192: SGLang's JIT refuses)", T=512, H=14336),
    ]
    for i, h in enumerate(hidden):
        src = next(m.name for m in MODELS if m.hidden == h)
        for j, t in enumerate(DECODE_T):
            if (i + j) % 2 == 0:
                cases.append(case(["decode"], f"{src} decode", T=t, H=h))
        for j, t in enumerate(PREFILL_T):
            if (i + j) % 2 == 0:
                cases.append(case(["prefill"], f"{src} prefill", T=t, H=h))
    cases += [
        case(["edge", "decode"], "edge: one token", T=1, H=4096),
        case(["edge"], "edge: the largest hidden SGLang's JIT accepts on sm_90", T=64, H=_JIT_MAX_H),
        case(["edge", "unsupported_by_sglang_jit"], "edge: H not a multiple of 8 (FlashInfer handles it)",
             T=17, H=4100),
        case(["prefill", "anchor"], "anchor h200.md", T=8192, H=8192),
    ]
    return dedup(cases)


def _trace(tensors: list[tuple[str, list[int]]]) -> dict[str, int] | None:
    if not tensors or len(tensors[0][1]) != 2:
        return None
    t, h = tensors[0][1]
    return {"T": t, "H": h}


def reference(**args):
    eps = float(args.get("eps", 1e-6))
    s = args["input"].float() + args["residual"].float()
    variance = s.pow(2).mean(dim=-1, keepdim=True)
    normed = s * torch.rsqrt(variance + eps) * args["weight"].float()
    return {"input": normed, "residual": s}


REFERENCE = FileText(
    doc=(
        "Reference for fused_add_rmsnorm (astra-sglang, written; restates RMSNorm.forward_native with a\n"
        "residual in float32): residual <- input + residual; input <- (residual * rsqrt(mean(residual^2) + eps)) * "
        "weight.\n"
        "Both results are returned in float32; the kernel stores them in the case dtype (one rounding each)."
    ),
    imports=("import torch",),
    functions=(reference,),
)


ENTRY = CatalogEntry(
    short_name="fused_add_rmsnorm",
    op_id=op_id_of(_ENTRY),
    entry_point=_ENTRY,
    kind="cuda_jit",
    signature=Signature(
        dims=[
            Dim(name="T", meaning="tokens (rows)"),
            Dim(name="H", meaning="hidden size (not split by TP)", multiple_of=8),
        ],
        tensors=[
            TensorArg(name="input", role="inplace", shape=["T", "H"], dtype="{dtype}"),
            TensorArg(name="residual", role="inplace", shape=["T", "H"], dtype="{dtype}"),
            TensorArg(name="weight", role="input", shape=["H"], dtype="{dtype}"),
        ],
        scalars=[ScalarArg(name="eps", type="float", default=1e-6, meaning="variance epsilon")],
        dtypes=["bfloat16", "float16"],
        relations=[
            "residual_out = input + residual",
            "input_out = residual_out * rsqrt(mean(residual_out^2, -1) + eps) * weight",
            f"SGLang's JIT kernel on sm_90 needs H % 8 == 0 and H <= {_JIT_MAX_H} (RuntimeCheck 'Large hidden_sizes "
            "are not supported'); shapes tagged unsupported_by_sglang_jit exceed it and are served by FlashInfer",
        ],
    ),
    reference=REFERENCE,
    shapes=_shapes,
    call=["input", "residual", "weight", "eps"],
    builder="sglang.kernels.ops.layernorm.norm:_jit_fused_add_rmsnorm_module",
    builder_args={"bfloat16": ("torch.bfloat16", False), "float16": ("torch.float16", False)},
    entry_export="fused_add_rmsnorm",
    forward_native="sglang.srt.layers.layernorm:RMSNorm.forward_native",
    callsite_modules=("sglang.kernels.ops.layernorm.norm", "sglang.srt.layers.layernorm"),
    serving_sites={_ENTRY: "the JIT function; RMSNorm.forward_cuda calls it as _jit_fused_add_rmsnorm"},
    extra_sites=[
        CallSite(
            module="sglang.srt.layers.layernorm", attr="_jit_fused_add_rmsnorm", binds="entry_point",
            target=hook_target(_ENTRY), same_function=True, reached_by_serving=True,
            note="CUDA only (read from source): used by RMSNorm.forward_cuda only when cast_x_before_out_mul=True "
            "and H <= 8192 (else forward_native)",
        ),
        CallSite(
            module="sglang.srt.layers.layernorm", attr="fused_add_rmsnorm", binds="flashinfer_fused_add_rmsnorm",
            target="sgl_kernel.fused_add_rmsnorm", same_function=True, reached_by_serving=True,
            note="CUDA only (read from source): `from sgl_kernel import fused_add_rmsnorm`, FlashInfer's norm.cuh, NOT "
            "the JIT entry point; the serving default (cast_x_before_out_mul=False); see baselines",
        ),
    ],
    flashinfer_baselines=[
        FlashInferBaseline(
            name="flashinfer_fused_add_rmsnorm",
            header="flashinfer/norm.cuh",
            glue="flashinfer_fused_add_rmsnorm.cuh",
            template_args={"bfloat16": "nv_bfloat16, true", "float16": "half, true"},
            exports=[("fused_add_rmsnorm", "astra_glue::FlashInferFusedAddRMSNorm<{targs}>::run")],
            entry="fused_add_rmsnorm",
            call=["input", "residual", "weight", "eps"],
            description="sgl_kernel.fused_add_rmsnorm = FlashInfer's FusedAddRMSNorm (norm.cuh), rebuilt from the "
            "installed flashinfer-python headers with our tvm-ffi glue",
            when="RMSNorm.forward_cuda with a residual and cast_x_before_out_mul=False (the default), any H",
            same_function=True,
            note="PDL enabled as on sm_90 (sgl_kernel passes enable_pdl=is_arch_support_pdl()); stand-in empty "
            "cublasLt.h/cublas_v2.h/curand_kernel.h (ours) because norm.cuh's includes name them unused",
            # RMSNorm.forward_cuda with a residual and cast_x_before_out_mul=False calls the from-imported
            # sgl_kernel.fused_add_rmsnorm for every hidden size and both dtypes: this op's function is served
            # here at every shape, the JIT kernel extracted here never (it is reached only with the flag set)
            serves=(ServeRule(source=_SERVED_AT),),
        )
    ],
    trace_dims=_trace,
    notes=[
        "template args: FusedAddRMSNormKernel<cast_x_before_out_mul=false, dtype> (the flag comes first)",
        "cast_x_before_out_mul=True (the only configuration the serving path sends to this JIT kernel) "
        "differs by rounding the normalized value before multiplying by weight; covered by the same tolerance",
    ],
)

