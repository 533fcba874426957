"""Scripted drafts for the drafting tests: contracts of SGLang's row_argmax (speculative decoding's FP32
row-wise argmax, a real Triton op with no catalog entry) written by the developers, not by a model.

``correct_draft()`` is the contract a careful author would write; the variants break exactly one thing.
"""

from __future__ import annotations

import copy
from typing import Any

OP = "speculative.row_argmax"

REFERENCE = '''import torch


def reference(x, **_):
    # torch.argmax returns the first maximal index, as the kernel's strict '>' does
    return {"out": x.to(torch.float64).argmax(dim=-1)}
'''

WRONG_REFERENCE = REFERENCE.replace(".argmax(dim=-1)", ".argmin(dim=-1)")

_VOCABS = {"LLaMA-2": 32000, "LLaMA-3": 128256, "Qwen2.5": 152064, "DeepSeek-V3": 129280}


def _shapes() -> list[dict[str, Any]]:
    shapes = []
    for i, rows in enumerate((1, 4, 16, 64, 65, 256)):
        for model, vocab in _VOCABS.items():
            if (i + len(model)) % 2 == 0 or rows in (1, 256):
                tag = "edge" if rows in (1, 65) else "decode"
                shapes.append({"dims": {"R": rows, "V": vocab}, "tags": [tag],
                               "source": f"{model} speculative verify, {rows} rows"})
    shapes.append({"dims": {"R": 3, "V": 1}, "tags": ["edge"], "source": "one-token vocabulary"})
    return shapes


def correct_draft() -> dict[str, Any]:
    return {
        "short_name": "row_argmax",
        "signature": {
            "dims": [{"name": "R", "meaning": "rows: speculative verify positions", "min": 1, "max": 4096},
                     {"name": "V", "meaning": "vocabulary size", "min": 1}],
            "tensors": [{"name": "x", "role": "input", "shape": ["R", "V"], "dtype": "{dtype}"},
                        {"name": "out", "role": "output", "shape": ["R"], "dtype": "int64"}],
            "dtypes": ["float32"],
            "relations": ["out[r] = first index of the maximum of x[r, :]"],
            "returns": ["out"],
        },
        "call": ["x"],
        "wrapper": "row_argmax",
        "reference": REFERENCE,
        "shapes": _shapes(),
        "tolerances": {"float32": {"atol": 1e-5, "rtol": 1e-5}},
        "serving_sites": {"sglang.srt.speculative.spec_utils:fast_sample": "greedy verify over FP32 logits"},
        "notes": ["int64 output: compared exactly"],
    }


def with_reference(text: str) -> dict[str, Any]:
    d = correct_draft()
    d["reference"] = text
    return d


def self_contradicting() -> dict[str, Any]:
    """Calls the wrapper with an argument the signature does not have."""
    d = correct_draft()
    d["call"] = ["x", "logits_scale"]
    return d


def changed(**fields: Any) -> dict[str, Any]:
    d = copy.deepcopy(correct_draft())
    d.update(fields)
    return d
