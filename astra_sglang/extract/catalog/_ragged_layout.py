"""Ragged <-> padded batch layout kernels (Triton ``attention/position.py`` and ``attention/pad.py``).

compute_position_triton: the positions of every extend token (prefix_len + 0..extend_len-1) and each request's
start in the flat token stream, for every extend batch (``ForwardBatch`` init). pad_draft_extend_query /
unpad_draft_extend_output: the TRT-LLM MLA backend's draft-extend / ragged-verify path copies a ragged query
stream [sum(lens), H, D] into a padded [B, M, H, D] block and the attention output back.
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import Dim, ShapeCase
from astra_sglang.extract.catalog._ragged_batch import _lengths
from astra_sglang.extract.catalog.base import exact_tolerances
from astra_sglang.extract.shapes import case, dedup

PAD = "sglang.kernels.ops.attention.pad"
MLA = "sglang.srt.layers.attention.trtllm_mla_backend"

COPY_DTYPES = ["bfloat16", "float16", "float32"]
# A copy moves bits: any difference is a wrong element, so tolerance 0 for every dtype.
COPY_TOL = exact_tolerances(COPY_DTYPES)


def pad_shapes() -> list[ShapeCase]:
    # DeepSeek-V3 MLA: 128 query heads split by TP; q head_dim 576 (512 latent + 64 rope), v_head_dim 512.
    cases: list[ShapeCase] = []
    for i, (tp, b) in enumerate(((1, 8), (2, 32), (4, 64), (8, 128), (8, 1), (4, 16))):
        s, e = (2, 2) if i % 2 else (3, 1)
        cases.append(case(["decode"], f"DeepSeek-V3 TP{tp} MTP draft extend, {b} requests", B=b, S=s, E=e,
                          H=128 // tp, D=576))
    cases += [case(["edge"], "edge: one request, all draft tokens accepted", B=1, S=4, E=0, H=16, D=576),
              case(["edge"], "edge: head_dim not a multiple of the 64-wide block", B=5, S=2, E=3, H=8, D=100)]
    return dedup(cases)


def pad_dims() -> list[Dim]:
    return [Dim(name="B", meaning="requests"), Dim(name="S", meaning="mean accepted tokens per request"),
            Dim(name="E", meaning="draft slots beyond S (M = S + E is the padded length)", min=0),
            Dim(name="H", meaning="query heads (after TP)"), Dim(name="D", meaning="head dim")]


# pad_draft_extend_query's and unpad_draft_extend_output's inputs.py (they differ only in the docstring).
def make_inputs(dims, dtype, gen, device):
    lens = _lengths(dims["B"], dims["S"], dims["E"], gen, device)
    cu = torch.zeros(dims["B"] + 1, dtype=torch.int64, device=device)
    cu[1:] = torch.cumsum(lens, 0)
    return {"seq_lens_q": lens.to(torch.int32), "cu_seqlens_q": cu.to(torch.int32)}
