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


# ------------------------------------------------------------- a CUDA JIT op: diffusion.bias_residual_add

CUDA_OP = "diffusion.bias_residual_add"

CUDA_REFERENCE = '''import torch


def reference(y, bias, h, channels, spatial, **_):
    # aten's eager chain on bf16: (y + bias) rounds to bf16, then + h rounds again
    v = y.view(-1, channels, spatial).float() + bias.float().view(1, -1, 1)
    out = v.to(y.dtype).float() + h.view(-1, channels, spatial).float()
    return {"out": out.to(y.dtype).view(-1)}
'''

CUDA_INPUTS = '''def make_inputs(dims, dtype, gen, device):
    return {}


def scalars(dims, dtype):
    return {"channels": dims["C"], "spatial": dims["S"]}
'''


def cuda_draft() -> dict[str, Any]:
    flat = ["N*C*S"]
    return {
        "short_name": "bias_residual_add",
        "signature": {
            "dims": [{"name": "N", "meaning": "batch", "min": 1},
                     {"name": "C", "meaning": "channels", "min": 1},
                     {"name": "S", "meaning": "spatial size (frames x height x width)", "min": 8,
                      "multiple_of": 8}],
            "tensors": [{"name": "out", "role": "output", "shape": flat, "dtype": "{dtype}"},
                        {"name": "y", "role": "input", "shape": flat, "dtype": "{dtype}"},
                        {"name": "h", "role": "input", "shape": flat, "dtype": "{dtype}"},
                        {"name": "bias", "role": "input", "shape": ["C"], "dtype": "{dtype}"}],
            "scalars": [{"name": "channels", "type": "int", "default": 1},
                        {"name": "spatial", "type": "int", "default": 8}],
            "dtypes": ["bfloat16"],
            "returns": [],
        },
        "call": ["out", "y", "h", "bias", "channels", "spatial"],
        "builder": "sglang.kernels.ops.diffusion.norm.bias_residual_add_jit:_jit_module",
        "builder_args": {"bfloat16": [False]},
        "entry_export": "run",
        "reference": CUDA_REFERENCE,
        "inputs": CUDA_INPUTS,
        "inputs_scalars": True,
        "shapes": [{"dims": {"N": 1, "C": c, "S": s}, "tags": ["prefill"], "source": f"diffusion VAE C={c}"}
                   for c in (128, 256, 512) for s in (64 * 64, 128 * 128)],
        "tolerances": {"bfloat16": {"atol": 1.6e-2, "rtol": 1.6e-2}},
        "notes": ["NCHW contiguous layout (channels_inner=False)"],
    }


# --------------------- a Triton kernel SGLang launches directly: attention.create_flashinfer_kv_indices_triton

BARE_OP = "attention.create_flashinfer_kv_indices_triton"

BARE_REFERENCE = '''import torch


def reference(req_to_token, req_pool_indices, page_kernel_lens, **_):
    rows = [req_to_token[int(r), :int(n)] for r, n in zip(req_pool_indices.tolist(), page_kernel_lens.tolist())]
    return {"kv_indices": torch.cat(rows)}
'''

BARE_INPUTS = '''import torch


def make_inputs(dims, dtype, gen, device):
    b, r, s, x = dims["B"], dims["R"], dims["S"], dims["X"]
    table = torch.randint(0, 1 << 20, (b + r, s + x), generator=gen, device=device, dtype=torch.int32)
    rows = torch.randperm(b + r, generator=gen, device=device)[:b].to(torch.int64)
    lens = torch.full((b,), s, dtype=torch.int32, device=device)
    indptr = torch.zeros(b + 1, dtype=torch.int32, device=device)
    indptr[1:] = torch.cumsum(lens, 0)
    return {"req_to_token": table, "req_pool_indices": rows, "page_kernel_lens": lens, "kv_indptr": indptr}
'''

# what FlashInferIndicesUpdaterDecode does: create_flashinfer_kv_indices_triton[(bs,)](..., None, kv_indices, stride)
BARE_ADAPTER = '''def call(kernel, req_to_token, req_pool_indices, page_kernel_lens, kv_indptr, kv_indices):
    kernel[(req_pool_indices.shape[0],)](req_to_token, req_pool_indices, page_kernel_lens, kv_indptr, None,
                                         kv_indices, req_to_token.stride(0))
'''


def bare_kernel_draft() -> dict[str, Any]:
    tiny = [{"dims": {"B": b, "R": r, "S": s, "X": x}, "tags": ["test", "decode"], "source": why}
            for b, r, s, x, why in ((1, 0, 1, 0, "one request, one token"), (3, 2, 7, 5, "three requests"),
                                    (2, 1, 600, 3, "a row longer than one 512-token block"))]
    return {
        "short_name": "create_flashinfer_kv_indices_triton",
        "signature": {
            "dims": [{"name": "B", "meaning": "requests in the batch"},
                     {"name": "R", "meaning": "request-pool rows not in the batch", "min": 0},
                     {"name": "S", "meaning": "tokens per request"},
                     {"name": "X", "meaning": "req_to_token columns past S", "min": 0}],
            "tensors": [
                {"name": "req_to_token", "role": "input", "shape": ["B+R", "S+X"], "dtype": "int32",
                 "align_bytes": 4, "generated": True},
                {"name": "req_pool_indices", "role": "input", "shape": ["B"], "dtype": "int64", "align_bytes": 8,
                 "generated": True},
                {"name": "page_kernel_lens", "role": "input", "shape": ["B"], "dtype": "int32", "align_bytes": 4,
                 "generated": True},
                {"name": "kv_indptr", "role": "input", "shape": ["B+1"], "dtype": "int32", "align_bytes": 4,
                 "generated": True},
                {"name": "kv_indices", "role": "output", "shape": ["B*S"], "dtype": "int32", "align_bytes": 4}],
            "dtypes": ["int32"],
            "relations": ["kv_indices[kv_indptr[i]:kv_indptr[i+1]] = req_to_token[req_pool_indices[i], :lens[i]]"],
            "returns": [],
        },
        "call": ["req_to_token", "req_pool_indices", "page_kernel_lens", "kv_indptr", "kv_indices"],
        "wrapper": "create_flashinfer_kv_indices_triton",
        "adapter": BARE_ADAPTER,
        "reference": BARE_REFERENCE,
        "inputs": BARE_INPUTS,
        "shapes": tiny,
        "tolerances": {"int32": {"atol": 0, "rtol": 0}},
        "serving_sites": {"sglang.srt.layers.attention.flashinfer_backend:FlashInferIndicesUpdaterDecode":
                          "every decode step's kv_indices with the FlashInfer backend"},
        "notes": ["SCRIPTED by the developers for the tests; integer output, compared exactly"],
    }
