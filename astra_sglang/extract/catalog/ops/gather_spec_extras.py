"""Gather the speculative extras of a batch out of per-request-slot buffers in one launch (Triton
``speculative/gather_spec_extras.py``), for the overlap scheduler (``srt/managers/overlap_utils.py``).

The overlap scheduler keeps each request slot's draft top-k probabilities and ids, its bonus token and (for
EAGLE) its last hidden state in buffers of req_pool_size rows; the next batch gathers its rows by slot index.
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import Dim, ShapeCase, Signature, TensorArg
from astra_sglang.extract.catalog.base import CatalogEntry, exact_tolerances
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import DECODE_T, MODELS, case, dedup

_MODULE = "sglang.kernels.ops.speculative.gather_spec_extras"
_DTYPES = ["bfloat16", "float16", "float32"]


def _shapes() -> list[ShapeCase]:
    # P = req_pool_size slots, K = EAGLE topk, H = hidden size of the target model (not split by TP)
    hidden = sorted({m.hidden: m.name for m in MODELS}.items())
    cases = [case(["decode"], f"{name} EAGLE topk {(1, 4, 8)[i % 3]}, {t} requests of a 512-slot pool",
                  M=t, P=512, K=(1, 4, 8)[i % 3], H=h)
             for i, ((h, name), t) in enumerate(zip(hidden * 2, DECODE_T))]
    cases += [case(["edge", "decode"], "edge: one request", M=1, P=8, K=1, H=4096),
              case(["edge"], "edge: hidden not a multiple of the 1024 block", M=5, P=64, K=10, H=3000)]
    return dedup(cases)


def reference(**args):
    i = args["indices"]
    return {"topk_p": args["topk_p_buf"][i], "topk_index": args["topk_index_buf"][i],
            "bonus_tokens": args["output_tokens_buf"][i], "hidden_states": args["hidden_states_buf"][i]}


def make_inputs(dims, dtype, gen, device):
    m, p = dims["M"], dims["P"]
    if m <= p:
        idx = torch.randperm(p, generator=gen, device=device)[:m]
    else:
        idx = torch.randint(0, p, (m,), generator=gen, device=device)
    return {"indices": idx.to(torch.int64)}


REFERENCE = FileText(
    doc="Reference for gather_spec_extras (astra-sglang, written): advanced-index gathers by slot.",
    functions=(reference,),
)

INPUTS = FileText(
    doc=(
        "Inputs for gather_spec_extras (astra-sglang, written): the batch's request slots, distinct rows\n"
        "of the pool when the pool is large enough (a random permutation), else drawn with repeats."
    ),
    imports=("import torch",),
    functions=(make_inputs,),
)


ENTRY = CatalogEntry(
    short_name="gather_spec_extras",
    op_id="speculative.gather_spec_extras",
    entry_point=f"{_MODULE}:gather_spec_extras",
    kind="triton",
    signature=Signature(
        dims=[Dim(name="M", meaning="requests gathered"), Dim(name="P", meaning="request slots (req_pool_size)"),
              Dim(name="K", meaning="draft top-k"), Dim(name="H", meaning="hidden size")],
        tensors=[
            TensorArg(name="indices", role="input", shape=["M"], dtype="int64", align_bytes=8, generated=True),
            TensorArg(name="topk_p_buf", role="input", shape=["P", "K"], dtype="float32", align_bytes=4),
            TensorArg(name="topk_index_buf", role="input", shape=["P", "K"], dtype="int64", align_bytes=8),
            TensorArg(name="output_tokens_buf", role="input", shape=["P"], dtype="int64", align_bytes=8),
            TensorArg(name="hidden_states_buf", role="input", shape=["P", "H"], dtype="{dtype}"),
            TensorArg(name="topk_p", role="output", shape=["M", "K"], dtype="float32", align_bytes=4),
            TensorArg(name="topk_index", role="output", shape=["M", "K"], dtype="int64", align_bytes=8),
            TensorArg(name="bonus_tokens", role="output", shape=["M"], dtype="int64", align_bytes=8),
            TensorArg(name="hidden_states", role="output", shape=["M", "H"], dtype="{dtype}"),
        ],
        dtypes=_DTYPES,
        relations=["every output row m = the source buffer's row indices[m]"],
        returns=["topk_p", "topk_index", "bonus_tokens", "hidden_states"],
    ),
    reference=REFERENCE,
    shapes=_shapes,
    call=["indices", "topk_p_buf", "topk_index_buf", "output_tokens_buf", "hidden_states_buf"],
    wrapper=f"{_MODULE}:gather_spec_extras",
    tolerances=exact_tolerances(_DTYPES),
    callsite_modules=(_MODULE, "sglang.srt.managers.overlap_utils"),
    serving_sites={"sglang.srt.managers.overlap_utils:gather_spec_extras": "overlap scheduler: a batch's "
                   "draft extras (EAGLE with hidden states: the 4-buffer launch)"},
    inputs=INPUTS,
    notes=["A gather copies: tolerance 0.", "The contract covers the hidden-states variant (HAS3); without "
           "hidden states the last result is None."],
)

