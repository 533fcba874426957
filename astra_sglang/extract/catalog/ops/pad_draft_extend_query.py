"""pad_draft_extend_query: the TRT-LLM MLA backend copies a ragged query stream [sum(lens), H, D] into
a padded [B, M, H, D] block (Triton ``attention/pad.py``).
"""

from __future__ import annotations

from astra_sglang.contract.op import Signature, TensorArg
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


def reference(**args):
    out = args["padded_q"].clone()
    q, lens, cu = args["q"], args["seq_lens_q"].tolist(), args["cu_seqlens_q"].tolist()
    for b, n in enumerate(lens):
        out[b, :n] = q[cu[b]:cu[b] + n]
    return {"padded_q": out}


REFERENCE = FileText(
    doc=(
        "Reference for pad_draft_extend_query (astra-sglang, written): request b's tokens\n"
        "q[cu[b] : cu[b] + len[b]] go to padded_q[b, :len[b]]; the rest of padded_q is left as it was."
    ),
    functions=(reference,),
)

INPUTS = FileText(
    doc=(
        "Inputs for pad_draft_extend_query (astra-sglang, written): B draft-extend requests with accepted lengths in "
        "[1, M]\n"
        "(M = S + E draft slots) summing to B*S, and their prefix sum cu_seqlens_q (int32, [B+1], as SGLang's\n"
        "qo_indptr)."
    ),
    imports=("import torch",),
    functions=(_lengths, make_inputs),
)


ENTRY = CatalogEntry(
    short_name="pad_draft_extend_query",
    op_id="attention.pad_draft_extend_query",
    entry_point=f"{PAD}:pad_draft_extend_query",
    kind="triton",
    signature=Signature(
        dims=pad_dims(),
        tensors=[
            TensorArg(name="q", role="input", shape=["B*S", "H", "D"], dtype="{dtype}"),
            TensorArg(name="padded_q", role="inplace", shape=["B", "S+E", "H", "D"], dtype="{dtype}"),
            TensorArg(name="seq_lens_q", role="input", shape=["B"], dtype="int32", align_bytes=4, generated=True),
            TensorArg(name="cu_seqlens_q", role="input", shape=["B+1"], dtype="int32", align_bytes=4,
                      generated=True),
        ],
        dtypes=COPY_DTYPES,
        relations=["padded_q[b, i] = q[cu_seqlens_q[b] + i] for i < seq_lens_q[b]; other rows untouched",
                   "1 <= seq_lens_q[b] <= S+E; cu_seqlens_q = [0, cumsum(seq_lens_q)]"],
        returns=["padded_q"],
    ),
    reference=REFERENCE,
    shapes=pad_shapes,
    call=["q", "padded_q", "seq_lens_q", "cu_seqlens_q"],
    wrapper=f"{PAD}:pad_draft_extend_query",
    tolerances=COPY_TOL,
    callsite_modules=(PAD,),
    serving_sites={f"{MLA}:pad_draft_extend_query_triton": "TRTLLMMLABackend.pad_draft_extend_query (draft "
                   "extend and ragged verify; padded_q is torch.zeros there)"},
    inputs=INPUTS,
    notes=["A copy: tolerance 0.", "SGLang passes a zeroed padded_q; the contract states the kernel leaves "
           "unwritten rows as they were, so padded_q is in-place and its other rows are checked unchanged."],
)
