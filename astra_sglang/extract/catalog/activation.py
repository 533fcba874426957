"""Gated activations ``act(x[..., :H]) * x[..., H:]`` (JIT ``elementwise/activation.cuh``) and relu2.

SGLang builds one module per dtype with ``ActivationKernel<dtype, use_pdl>`` and ``--use_fast_math`` on CUDA;
the gated ops call the ``run_activation`` export with the activation's name.
"""

from __future__ import annotations

from astra_sglang.contract.op import (
    CallSite,
    Dim,
    ShapeCase,
    Signature,
    TensorArg,
    hook_target,
)
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.shapes import case, decode_prefill, dedup, model_widths

_DTYPES = ["bfloat16", "float16", "float32"]
_BUILDER = "sglang.kernels.ops.activation.activation:activation_module"
_BUILDER_ARGS = {"bfloat16": ("torch.bfloat16",), "float16": ("torch.float16",), "float32": ("torch.float32",)}
_MODULE = "sglang.kernels.ops.activation.activation"

_GATED_REFERENCE = '''"""Reference for {name} (astra-sglang, written): float32, {formula}."""

import torch


def reference(**args):
    x = args["input"].float()
    h = x.shape[-1] // 2
    gate, up = x[..., :h], x[..., h:]
    return {{"out": {expr} * up}}
'''

_GATED = {
    "silu": ("silu_and_mul", "torch.nn.functional.silu(gate)", "out = silu(x[..., :H]) * x[..., H:]"),
    "gelu": ("gelu_and_mul", "torch.nn.functional.gelu(gate)", "out = gelu_erf(x[..., :H]) * x[..., H:]"),
    "gelu_tanh": (
        "gelu_tanh_and_mul",
        "torch.nn.functional.gelu(gate, approximate='tanh')",
        "out = gelu_tanh(x[..., :H]) * x[..., H:]",
    ),
}


def _gated_shapes() -> list[ShapeCase]:
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


def _signature() -> Signature:
    return Signature(
        dims=[
            Dim(name="T", meaning="tokens (rows)"),
            Dim(name="H", meaning="output width = MLP intermediate size / TP", multiple_of=8),
        ],
        tensors=[
            TensorArg(name="input", role="input", shape=["T", "2*H"], dtype="{dtype}"),
            TensorArg(name="out", role="output", shape=["T", "H"], dtype="{dtype}"),
        ],
        dtypes=list(_DTYPES),
        relations=[
            "out[t, i] = act(input[t, i]) * input[t, H + i]",
            "H * sizeof(dtype) must be a multiple of 16 bytes for SGLang's JIT kernel (multiple_of is for 2-byte "
            "dtypes; float32 needs H % 4 == 0); SGLang serves other widths with sgl_kernel's AOT kernel",
        ],
    )


def _gated(op_name: str) -> CatalogEntry:
    name, expr, formula = _GATED[op_name]
    sites = {f"{_MODULE}:{name}": "the JIT wrapper; sglang.srt.layers.activation binds it as _jit_" + name}
    extra = [
        CallSite(
            module="sglang.srt.layers.activation", attr=name, binds="caller", target=None, same_function=True,
            reached_by_serving=True,
            note=f"CUDA only (read from source): calls _jit_{name} when the output width is a multiple of 16 bytes, "
            f"else sgl_kernel.{name}; a different function object, it calls the entry point",
        ),
        CallSite(
            module="sglang.srt.layers.activation", attr=f"_jit_{name}", binds="entry_point",
            target=hook_target(f"{_MODULE}:{name}"), same_function=True, reached_by_serving=True,
            note=f"CUDA only (read from source): `from ... import {name} as _jit_{name}`",
        ),
    ]
    return CatalogEntry(
        short_name=name,
        op_id="activation.silu_and_mul" if op_name == "silu" else f"{_MODULE}:{name}",
        entry_point=f"{_MODULE}:{name}",
        kind="cuda_jit",
        signature=_signature(),
        reference=_GATED_REFERENCE.format(name=name, formula=formula, expr=expr),
        shapes=_gated_shapes,
        call=["input", "out", repr(op_name)],
        builder=_BUILDER,
        builder_args=dict(_BUILDER_ARGS),
        entry_export="run_activation",
        forward_native="sglang.kernels.ops.activation:_SILU_AND_MUL.forward_native" if op_name == "silu" else None,
        aliases=(f"activation.{name}",),
        callsite_modules=("sglang.kernels.ops.activation", "sglang.srt.layers.activation",
                          "sglang.srt.layers.moe.fused_moe_triton.fused_moe"),
        serving_sites=sites,
        extra_sites=extra,
        trace_dims=_trace_gated,
        notes=[
            "Built like SGLang on sm_90: ActivationKernel<dtype, use_pdl=true>, --use_fast_math (is_cuda()).",
        ],
    )


def _trace_gated(tensors: list[tuple[str, list[int]]]) -> dict[str, int] | None:
    if not tensors or len(tensors[0][1]) < 1:
        return None
    shape = tensors[0][1]
    rows = 1
    for s in shape[:-1]:
        rows *= s
    return {"T": rows, "H": shape[-1] // 2}


SILU_AND_MUL = _gated("silu")
GELU_AND_MUL = _gated("gelu")
GELU_TANH_AND_MUL = _gated("gelu_tanh")


_RELU2_REFERENCE = '''"""Reference for relu2 (astra-sglang, written): float32, out = relu(x) ** 2."""

import torch


def reference(**args):
    x = args["input"].float()
    return {"out": torch.relu(x) ** 2}
'''


def _relu2_shapes() -> list[ShapeCase]:
    widths = model_widths(lambda m, tp: m.intermediate // tp if m.intermediate % tp == 0 else None)
    return dedup(
        [
            *decode_prefill(({"H": w}, src) for w, src in widths),
            case(["edge", "decode"], "edge: one token", T=1, H=14336),
            case(["edge"], "edge: one vector", T=3, H=8),
        ]
    )


RELU2 = CatalogEntry(
    short_name="relu2",
    op_id=f"{_MODULE}:relu2",
    entry_point=f"{_MODULE}:relu2",
    kind="cuda_jit",
    signature=Signature(
        dims=[Dim(name="T", meaning="tokens"), Dim(name="H", meaning="width", multiple_of=8)],
        tensors=[
            TensorArg(name="input", role="input", shape=["T", "H"], dtype="{dtype}"),
            TensorArg(name="out", role="output", shape=["T", "H"], dtype="{dtype}"),
        ],
        dtypes=list(_DTYPES),
        relations=["out = relu(input)^2 elementwise", "T*H*sizeof(dtype) must be a multiple of 16 bytes"],
    ),
    reference=_RELU2_REFERENCE,
    shapes=_relu2_shapes,
    call=["input", "out", "'relu2'"],
    builder=_BUILDER,
    builder_args=dict(_BUILDER_ARGS),
    entry_export="run_unary_activation",
    callsite_modules=("sglang.kernels.ops.activation",),
    serving_sites={f"{_MODULE}:relu2": "the JIT wrapper (squared-ReLU MLPs)"},
    notes=["fast_math=True build (the default of relu2); SGLang disables it to keep bf16 subnormals exact."],
)

ENTRIES = [SILU_AND_MUL, GELU_AND_MUL, GELU_TANH_AND_MUL, RELU2]


_ROUNDED_REFERENCE = '''"""Reference for silu_and_mul_with_activation_rounding (astra-sglang, written): silu(gate) is rounded to the
input dtype before the multiply (eager PyTorch order), then the product is computed in float32."""

import torch


def reference(**args):
    x = args["input"]
    h = x.shape[-1] // 2
    act = torch.nn.functional.silu(x[..., :h].float()).to(x.dtype).float()
    return {"out": act * x[..., h:].float()}
'''

SILU_AND_MUL_ROUNDED = CatalogEntry(
    short_name="silu_and_mul_with_activation_rounding",
    op_id=f"{_MODULE}:silu_and_mul_with_activation_rounding",
    entry_point=f"{_MODULE}:silu_and_mul_with_activation_rounding",
    kind="cuda_jit",
    signature=_signature(),
    reference=_ROUNDED_REFERENCE,
    shapes=_gated_shapes,
    call=["input", "out", "'silu'", "0.0"],
    builder=_BUILDER,
    builder_args=dict(_BUILDER_ARGS),
    builder_kwargs={"fast_math": False},
    entry_export="run_activation_with_rounding",
    callsite_modules=("sglang.kernels.ops.activation",),
    serving_sites={f"{_MODULE}:silu_and_mul_with_activation_rounding": "the JIT wrapper (eager-parity SiLU)"},
    trace_dims=_trace_gated,
    notes=["Built without --use_fast_math (module 'rounded_activation'), as SGLang does for eager parity; "
           "clamp_limit 0.0 = no clamping."],
)

ENTRIES.append(SILU_AND_MUL_ROUNDED)
