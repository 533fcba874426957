"""Logit soft-capping (Triton ``activation/softcap.py``): logits <- cap * tanh(logits / cap), and its fp32 casts.

One kernel (softcap_inplace_logits_kernel) behind three wrappers: in place, soft-capped into a float32
output, and a plain float32 cast (APPLY_SOFTCAP=False).
"""

from __future__ import annotations

from astra_sglang.contract.op import (
    Dim,
    ScalarArg,
    ShapeCase,
    Signature,
    TensorArg,
    Tolerance,
)
from astra_sglang.extract.catalog.base import DEFAULT_TOLERANCES, CatalogEntry
from astra_sglang.extract.shapes import DECODE_T, case, dedup

_MODULE = "sglang.kernels.ops.activation.softcap"
_VOCAB = {"LLaMA-2": 32000, "LLaMA-3": 128256, "Qwen2.5": 152064, "Gemma-2 (softcap user)": 256000}


def _shapes() -> list[ShapeCase]:
    cases: list[ShapeCase] = []
    for i, (name, v) in enumerate(_VOCAB.items()):
        for j, t in enumerate(DECODE_T):
            if (i + j) % 2 == 0:
                cases.append(case(["decode"], f"{name} vocab, decode batch", T=t, V=v))
        cases.append(case(["prefill"], f"{name} vocab, prefill of 512 sequences (last tokens)", T=512, V=v))
    cases += [
        case(["edge", "decode"], "edge: one token", T=1, V=128256),
        case(["edge"], "edge: V not a multiple of the 1024-wide block", T=7, V=1000),
    ]
    return dedup(cases)


def _dims() -> list[Dim]:
    return [Dim(name="T", meaning="rows (tokens whose logits are computed)"), Dim(name="V", meaning="vocab size")]


def _trace(tensors: list[tuple[str, list[int]]]) -> dict[str, int] | None:
    if not tensors or len(tensors[0][1]) != 2:
        return None
    return {"T": tensors[0][1][0], "V": tensors[0][1][1]}


_SOFTCAP_REFERENCE = '''"""Reference for {name} (astra-sglang, written): float32 softcap * tanh(x / softcap)."""

import torch


def reference(**args):
    cap = float(args.get("softcap", 30.0))
    return {{"{out}": torch.tanh(args["logits"].float() / cap) * cap}}
'''

_CAP = ScalarArg(name="softcap", type="float", default=30.0, meaning="final_logit_softcapping (Gemma-2: 30.0)")
# In-place bf16/fp16 capping divides, takes tanh and multiplies in the storage dtype's promotion rules, so it
# can round more than once: allow 3 ulp for 2-byte dtypes.
_INPLACE_TOL = {
    "bfloat16": Tolerance(atol=2.4e-2, rtol=2.4e-2),
    "float16": Tolerance(atol=3e-3, rtol=3e-3),
    "float32": DEFAULT_TOLERANCES["float32"],
}

SOFTCAP_INPLACE = CatalogEntry(
    short_name="softcap_inplace_logits",
    op_id="activation.softcap_inplace_logits",
    entry_point=f"{_MODULE}:softcap_inplace_logits",
    kind="triton",
    signature=Signature(
        dims=_dims(),
        tensors=[TensorArg(name="logits", role="inplace", shape=["T", "V"], dtype="{dtype}", align_bytes=4)],
        scalars=[_CAP],
        dtypes=["float32", "bfloat16", "float16"],
        relations=["logits <- softcap * tanh(logits / softcap)"],
    ),
    reference=_SOFTCAP_REFERENCE.format(name="softcap_inplace_logits", out="logits"),
    shapes=_shapes,
    call=["logits", "softcap"],
    wrapper=f"{_MODULE}:softcap_inplace_logits",
    tolerances=_INPLACE_TOL,
    callsite_modules=(_MODULE,),
    serving_sites={f"{_MODULE}:softcap_inplace_logits": "logits processor (final_logit_softcapping models)"},
    trace_dims=_trace,
)

SOFTCAP_TO_FP32 = CatalogEntry(
    short_name="softcap_to_float32_logits",
    op_id="activation.softcap_to_float32_logits",
    entry_point=f"{_MODULE}:softcap_to_float32_logits",
    kind="triton",
    signature=Signature(
        dims=_dims(),
        tensors=[
            TensorArg(name="logits", role="input", shape=["T", "V"], dtype="{dtype}", align_bytes=4),
            TensorArg(name="output", role="output", shape=["T", "V"], dtype="float32", align_bytes=4),
        ],
        scalars=[_CAP],
        dtypes=["bfloat16", "float16", "float32"],
        relations=["output = softcap * tanh(float32(logits) / softcap)"],
    ),
    reference=_SOFTCAP_REFERENCE.format(name="softcap_to_float32_logits", out="output"),
    shapes=_shapes,
    call=["logits", "softcap", "output"],
    wrapper=f"{_MODULE}:softcap_to_float32_logits",
    tolerances={d: DEFAULT_TOLERANCES["float32"] for d in ("bfloat16", "float16", "float32")},
    callsite_modules=(_MODULE,),
    serving_sites={f"{_MODULE}:softcap_to_float32_logits": "logits processor, fp32 logits with soft-capping"},
    trace_dims=_trace,
    notes=["The output is float32 for every input dtype, so every dtype uses the float32 tolerance."],
)

CAST_TO_FP32 = CatalogEntry(
    short_name="cast_to_float32_logits",
    op_id="activation.cast_to_float32_logits",
    entry_point=f"{_MODULE}:cast_to_float32_logits",
    kind="triton",
    signature=Signature(
        dims=_dims(),
        tensors=[
            TensorArg(name="logits", role="input", shape=["T", "V"], dtype="{dtype}", align_bytes=4),
            TensorArg(name="output", role="output", shape=["T", "V"], dtype="float32", align_bytes=4),
        ],
        dtypes=["bfloat16", "float16"],
        relations=["output = float32(logits) (exact)"],
    ),
    reference='''"""Reference for cast_to_float32_logits (astra-sglang, written): an exact widening cast."""


def reference(**args):
    return {"output": args["logits"].float()}
''',
    shapes=_shapes,
    call=["logits", "output"],
    wrapper=f"{_MODULE}:cast_to_float32_logits",
    tolerances={d: Tolerance(atol=0.0, rtol=0.0) for d in ("bfloat16", "float16")},
    callsite_modules=(_MODULE,),
    serving_sites={f"{_MODULE}:cast_to_float32_logits": "logits processor, fp32 logits without soft-capping"},
    trace_dims=_trace,
    notes=["Widening bf16/fp16 to float32 is exact: tolerance 0."],
)

ENTRIES = [SOFTCAP_INPLACE, SOFTCAP_TO_FP32, CAST_TO_FP32]
