"""draft_topk1_postprocess: EAGLE's topk=1 draft step (Triton ``speculative/topk1.py``): argmax of every
row's draft logits, topk_p = 1, positions += 1, the token written into a column of the draft-token buffer.
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import Dim, ScalarArg, ShapeCase, Signature, TensorArg
from astra_sglang.extract.catalog.base import CatalogEntry, exact_tolerances
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import DECODE_T, case, dedup

_TOPK1 = "sglang.kernels.ops.speculative.topk1"

_VOCAB = {"LLaMA-3 (EAGLE-3 draft)": 128256, "Qwen2.5": 152064, "DeepSeek-V3 (MTP)": 129280, "GLM-4.5": 151552}


def _topk1_shapes() -> list[ShapeCase]:
    cases = [case(["decode"], f"{name} vocab, {t} requests", B=t, V=v, W=4)
             for i, (name, v) in enumerate(_VOCAB.items()) for t in DECODE_T[i % 2::2]]
    cases += [case(["edge", "decode"], "edge: one request", B=1, V=128256, W=1),
              case(["edge"], "edge: vocab not a multiple of the 8192 split", B=3, V=1000, W=8)]
    return dedup(cases)


def reference(**args):
    x = args["next_token_logits"].float()
    x = torch.where(torch.isnan(x), torch.full_like(x, -1e30), x)
    index = x.argmax(dim=-1, keepdim=True)
    tokens = args["draft_tokens"].clone()
    tokens[:, args["draft_token_column"]] = index[:, 0]
    return {"topk_p": torch.ones_like(index, dtype=torch.float32), "topk_index": index,
            "positions": args["positions"] + 1, "draft_tokens": tokens}


def make_inputs(dims, dtype, gen, device):
    return {"positions": torch.randint(0, 32768, (dims["B"],), generator=gen, device=device)}


def scalars(dims, dtype):
    return {"draft_token_column": dims["W"] // 2}


REFERENCE = FileText(
    doc=(
        "Reference for draft_topk1_postprocess (astra-sglang, written): greedy top-1 of the float32 logits\n"
        "(NaN never wins: read as -1e30 like the kernel; ties go to the lowest index like torch.argmax)."
    ),
    imports=("import torch",),
    functions=(reference,),
)

INPUTS = FileText(
    doc=(
        "Inputs for draft_topk1_postprocess (astra-sglang, written): each request's current position (a\n"
        "context length below 32k) and the draft step (column) this call writes."
    ),
    imports=("import torch",),
    functions=(make_inputs, scalars),
)


ENTRY = CatalogEntry(
    short_name="draft_topk1_postprocess",
    op_id="speculative.draft_topk1_postprocess",
    entry_point=f"{_TOPK1}:draft_topk1_postprocess",
    kind="triton",
    signature=Signature(
        dims=[Dim(name="B", meaning="requests"), Dim(name="V", meaning="draft vocab"),
              Dim(name="W", meaning="columns of the draft-token buffer (speculative steps)")],
        tensors=[
            TensorArg(name="next_token_logits", role="input", shape=["B", "V"], dtype="{dtype}", align_bytes=4),
            TensorArg(name="positions", role="inplace", shape=["B"], dtype="int64", align_bytes=8, generated=True),
            TensorArg(name="draft_tokens", role="inplace", shape=["B", "W"], dtype="int64", align_bytes=8),
            TensorArg(name="topk_p", role="output", shape=["B", "1"], dtype="float32", align_bytes=4),
            TensorArg(name="topk_index", role="output", shape=["B", "1"], dtype="int64", align_bytes=8),
        ],
        scalars=[ScalarArg(name="draft_token_column", type="int", default=0, meaning="the draft step written")],
        dtypes=["float32", "bfloat16", "float16"],
        relations=["topk_index[b, 0] = first argmax of float32(logits[b]) with NaN read as -1e30",
                   "topk_p = 1.0; positions += 1; draft_tokens[b, draft_token_column] = topk_index[b, 0]"],
        returns=["topk_p", "topk_index"],
    ),
    reference=REFERENCE,
    shapes=_topk1_shapes,
    call=["next_token_logits", "positions", "draft_tokens", "draft_token_column"],
    wrapper=f"{_TOPK1}:draft_topk1_postprocess",
    tolerances=exact_tolerances(["float32", "bfloat16", "float16"]),
    callsite_modules=(_TOPK1,),
    serving_sites={"sglang.srt.speculative.eagle_worker_v2:draft_topk1_postprocess": "EAGLE v2 draft loop with "
                   "topk=1 (read from source: the worker module imports only on CUDA)"},
    inputs=INPUTS,
    inputs_scalars=True,
    notes=["Every output is an index, a count or the constant 1.0: compared exactly.",
           "Ties: the kernel takes each split's first maximum (tl.argmax) and the first split holding the "
           "overall maximum, i.e. the first maximum, like torch.argmax."],
)
