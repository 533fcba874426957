"""unpad_draft_extend_output: the TRT-LLM MLA backend copies the padded [B, M, H, D] attention output
back into the ragged stream (Triton ``attention/pad.py``).
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import ScalarArg, ShapeCase, Signature, TensorArg
from astra_sglang.extract.catalog._ragged_batch import _lengths
from astra_sglang.extract.catalog._ragged_layout import (
    COPY_DTYPES,
    COPY_TOL,
    MLA,
    PAD,
    make_inputs,
    pad_dims,
    pad_shapes,
)
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.catalog.source_text import FileText


def _unpad_shapes() -> list[ShapeCase]:
    return [ShapeCase(dims={**c.dims, "D": 512 if c.dims["D"] == 576 else c.dims["D"]}, tags=c.tags,
                      source=c.source.replace("draft extend", "draft extend output (v_head_dim 512)"))
            for c in pad_shapes()]


def reference(**args):
    raw, lens = args["raw_out"], args["seq_lens_q"].tolist()
    return {"output": torch.cat([raw[b, :n] for b, n in enumerate(lens)], 0)}


def scalars(dims, dtype):
    return {"sum_seq_lens_q": dims["B"] * dims["S"]}


REFERENCE = FileText(
    doc=(
        "Reference for unpad_draft_extend_output (astra-sglang, written): output[cu[b] + i] = raw_out[b, i]\n"
        "for i < len[b]: the ragged stream of every request's first len[b] rows."
    ),
    imports=("import torch",),
    functions=(reference,),
)

INPUTS = FileText(
    doc=(
        "Inputs for unpad_draft_extend_output (astra-sglang, written): B draft-extend requests with accepted lengths "
        "in [1, M]\n"
        "(M = S + E draft slots) summing to B*S, and their prefix sum cu_seqlens_q (int32, [B+1], as SGLang's\n"
        "qo_indptr)."
    ),
    imports=("import torch",),
    functions=(_lengths, scalars, make_inputs),
)


ENTRY = CatalogEntry(
    short_name="unpad_draft_extend_output",
    op_id="attention.unpad_draft_extend_output",
    entry_point=f"{PAD}:unpad_draft_extend_output",
    kind="triton",
    signature=Signature(
        dims=pad_dims(),
        tensors=[
            TensorArg(name="raw_out", role="input", shape=["B", "S+E", "H", "D"], dtype="{dtype}"),
            TensorArg(name="cu_seqlens_q", role="input", shape=["B+1"], dtype="int32", align_bytes=4,
                      generated=True),
            TensorArg(name="seq_lens_q", role="input", shape=["B"], dtype="int32", align_bytes=4, generated=True),
            TensorArg(name="output", role="output", shape=["B*S", "H", "D"], dtype="{dtype}"),
        ],
        scalars=[ScalarArg(
            name="sum_seq_lens_q", type="int", meaning="sum(seq_lens_q), a host int")],
        dtypes=COPY_DTYPES,
        relations=["output[cu_seqlens_q[b] + i] = raw_out[b, i] for i < seq_lens_q[b]"],
        returns=["output"],
    ),
    reference=REFERENCE,
    shapes=_unpad_shapes,
    call=["raw_out", "cu_seqlens_q", "seq_lens_q", "sum_seq_lens_q"],
    wrapper=f"{PAD}:unpad_draft_extend_output",
    tolerances=COPY_TOL,
    callsite_modules=(PAD,),
    serving_sites={f"{MLA}:unpad_draft_extend_output_triton": "TRTLLMMLABackend.unpad_draft_extend_output "
                   "(without the CUDA-graph buffer the output is a fresh torch.empty)"},
    inputs=INPUTS,
    inputs_scalars=True,
    notes=["A copy: tolerance 0."],
)
