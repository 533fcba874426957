"""SGLang's JIT activation module (``elementwise/activation.cuh``) and the declaration its gated ops share.

SGLang builds one module per dtype with ``ActivationKernel<dtype, use_pdl>`` and ``--use_fast_math`` on CUDA;
the gated ops ``act(x[..., :H]) * x[..., H:]`` call the ``run_activation`` export with the activation's name,
so they differ only in that name and their reference.
"""

from __future__ import annotations

from astra_sglang.contract.op import (
    CallSite,
    Dim,
    ShapeCase,
    Signature,
    TensorArg,
    hook_target,
    op_id_of,
)
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import case, decode_prefill, dedup, model_widths

DTYPES = ["bfloat16", "float16", "float32"]
BUILDER = "sglang.kernels.ops.activation.activation:activation_module"
BUILDER_ARGS = {"bfloat16": ("torch.bfloat16",), "float16": ("torch.float16",), "float32": ("torch.float32",)}
MODULE = "sglang.kernels.ops.activation.activation"


def gated_shapes() -> list[ShapeCase]:
    widths = model_widths(lambda m, tp: m.intermediate // tp if m.intermediate % tp == 0 else None)
    cases = [
        # Astra paper-ish anchors measured on the H200 (see h200.md): input [T, 2H]
        case(["paper", "anchor"], "anchor h200.md (LLaMA-2-7B MLP)", T=128, H=11008),
        case(["paper", "anchor"], "anchor h200.md (LLaMA-3-8B MLP)", T=1024, H=14336),
        case(["paper", "anchor"], "anchor h200.md (LLaMA-3-8B MLP)", T=8192, H=14336),
        *decode_prefill(({"H": w}, src) for w, src in widths),
        case(["edge", "decode"], "edge: one token", T=1, H=14336),
        case(["edge"], "edge: narrowest vector (one 16-byte vector of bf16)", T=64, H=8),
        case(["edge", "unsupported_by_sglang_jit"], "edge: H not a multiple of the 16-byte vector", T=33, H=1004),
    ]
    return dedup(cases)


def gated_signature() -> Signature:
    return Signature(
        dims=[
            Dim(name="T", meaning="tokens (rows)"),
            Dim(name="H", meaning="output width = MLP intermediate size / TP", multiple_of=8),
        ],
        tensors=[
            TensorArg(name="input", role="input", shape=["T", "2*H"], dtype="{dtype}"),
            TensorArg(name="out", role="output", shape=["T", "H"], dtype="{dtype}"),
        ],
        dtypes=list(DTYPES),
        relations=[
            "out[t, i] = act(input[t, i]) * input[t, H + i]",
            "H * sizeof(dtype) must be a multiple of 16 bytes for SGLang's JIT kernel (multiple_of is for 2-byte "
            "dtypes; float32 needs H % 4 == 0); SGLang serves other widths with sgl_kernel's AOT kernel",
        ],
    )


def trace_gated(tensors: list[tuple[str, list[int]]]) -> dict[str, int] | None:
    if not tensors or len(tensors[0][1]) < 1:
        return None
    shape = tensors[0][1]
    rows = 1
    for s in shape[:-1]:
        rows *= s
    return {"T": rows, "H": shape[-1] // 2}


def gated_entry(name: str, act: str, reference: FileText) -> CatalogEntry:
    """The entry of gated op ``name`` (e.g. silu_and_mul), which passes ``act`` (e.g. 'silu') to run_activation."""
    sites = {f"{MODULE}:{name}": "the JIT wrapper; sglang.srt.layers.activation binds it as _jit_" + name}
    extra = [
        CallSite(
            module="sglang.srt.layers.activation", attr=name, binds="caller", target=None, same_function=True,
            reached_by_serving=True,
            note=f"CUDA only (read from source): calls _jit_{name} when the output width is a multiple of 16 bytes, "
            f"else sgl_kernel.{name}; a different function object, it calls the entry point",
        ),
        CallSite(
            module="sglang.srt.layers.activation", attr=f"_jit_{name}", binds="entry_point",
            target=hook_target(f"{MODULE}:{name}"), same_function=True, reached_by_serving=True,
            note=f"CUDA only (read from source): `from ... import {name} as _jit_{name}`",
        ),
    ]
    return CatalogEntry(
        short_name=name,
        op_id="activation.silu_and_mul" if act == "silu" else op_id_of(f"{MODULE}:{name}"),  # silu: registered
        entry_point=f"{MODULE}:{name}",
        kind="cuda_jit",
        signature=gated_signature(),
        reference=reference,
        shapes=gated_shapes,
        call=["input", "out", repr(act)],
        builder=BUILDER,
        builder_args=dict(BUILDER_ARGS),
        entry_export="run_activation",
        forward_native="sglang.kernels.ops.activation:_SILU_AND_MUL.forward_native" if act == "silu" else None,
        aliases=(f"activation.{name}",),
        callsite_modules=("sglang.kernels.ops.activation", "sglang.srt.layers.activation",
                          "sglang.srt.layers.moe.fused_moe_triton.fused_moe"),
        serving_sites=sites,
        extra_sites=extra,
        trace_dims=trace_gated,
        notes=[
            "Built like SGLang on sm_90: ActivationKernel<dtype, use_pdl=true>, --use_fast_math (is_cuda()).",
        ],
    )
