"""Logit soft-capping (Triton ``activation/softcap.py``): logits <- cap * tanh(logits / cap), and its fp32 casts.

One kernel (softcap_inplace_logits_kernel) behind three wrappers: in place, soft-capped into a float32
output, and a plain float32 cast (APPLY_SOFTCAP=False).
"""

from __future__ import annotations

from astra_sglang.contract.op import (
    Dim,
    ScalarArg,
    ShapeCase,
)
from astra_sglang.extract.shapes import DECODE_T, case, dedup

MODULE = "sglang.kernels.ops.activation.softcap"
VOCAB = {"LLaMA-2": 32000, "LLaMA-3": 128256, "Qwen2.5": 152064, "Gemma-2 (softcap user)": 256000}


def shapes() -> list[ShapeCase]:
    cases: list[ShapeCase] = []
    for i, (name, v) in enumerate(VOCAB.items()):
        for j, t in enumerate(DECODE_T):
            if (i + j) % 2 == 0:
                cases.append(case(["decode"], f"{name} vocab, decode batch", T=t, V=v))
        cases.append(case(["prefill"], f"{name} vocab, prefill of 512 sequences (last tokens)", T=512, V=v))
    cases += [
        case(["edge", "decode"], "edge: one token", T=1, V=128256),
        case(["edge"], "edge: V not a multiple of the 1024-wide block", T=7, V=1000),
    ]
    return dedup(cases)


def dims() -> list[Dim]:
    return [Dim(name="T", meaning="rows (tokens whose logits are computed)"), Dim(name="V", meaning="vocab size")]


def trace(tensors: list[tuple[str, list[int]]]) -> dict[str, int] | None:
    if not tensors or len(tensors[0][1]) != 2:
        return None
    return {"T": tensors[0][1][0], "V": tensors[0][1][1]}


CAP = ScalarArg(name="softcap", type="float", default=30.0, meaning="final_logit_softcapping (Gemma-2: 30.0)")
