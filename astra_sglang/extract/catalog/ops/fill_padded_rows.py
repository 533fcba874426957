"""Fill the CUDA-graph padding rows of MoE top-k outputs (Triton ``moe/fill_padded_rows.py``).

Under CUDA graphs a batch is padded to the captured size; rows at or past ``num_token_non_padded`` (a device
scalar) must not route anywhere: top-k ids get -1 and top-k weights 0 (``srt/layers/moe/topk.py``
_mask_topk_ids_padded_region / _zero_topk_weights_padded_region).
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import Dim, ScalarArg, ShapeCase, Signature, TensorArg
from astra_sglang.extract.catalog.base import CatalogEntry, exact_tolerances
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import DECODE_T, case, dedup

_MODULE = "sglang.kernels.ops.moe.fill_padded_rows"
_TOPK = "sglang.srt.layers.moe.topk"
_K = {"Mixtral-8x7B": 2, "Qwen3-MoE": 8, "DeepSeek-V3": 8}


def _shapes() -> list[ShapeCase]:
    cases = [case(["decode"], f"{name} top-{k}, CUDA-graph batch {t}", T=t, K=k)
             for i, (name, k) in enumerate(_K.items()) for t in DECODE_T[i % 2::2]]
    cases += [case(["edge", "decode"], "edge: one row", T=1, K=8),
              case(["edge"], "edge: largest captured batch (cuda_graph_max_bs 512)", T=512, K=8),
              case(["edge"], "edge: k not a power of two", T=48, K=6)]
    return dedup(cases)


def reference(**args):
    x = args["x"].clone()
    rows = torch.arange(x.shape[0], device=x.device)
    x.masked_fill_((rows >= args["num_token_non_padded"])[:, None], args["fill_value"])
    return {"x": x}


def make_inputs(dims, dtype, gen, device):
    n = torch.randint(0, dims["T"] + 1, (), generator=gen, device=device)
    return {"num_token_non_padded": n.to(torch.int32)}


def scalars(dims, dtype):
    return {"fill_value": -1 if dtype == "int32" else 0.0}


REFERENCE = FileText(
    doc=(
        "Reference for fill_padded_rows (astra-sglang, written; restates topk.py's CPU branch:\n"
        "x.masked_fill_((arange(T) >= n)[:, None], fill_value))."
    ),
    imports=("import torch",),
    functions=(reference,),
)

INPUTS = FileText(
    doc=(
        "Inputs for fill_padded_rows (astra-sglang, written): the real token count of a padded CUDA-graph\n"
        "batch, a 0-dim int32 device tensor in [0, T] (0 and T included: all-padding and no-padding batches), and the\n"
        "fill value SGLang uses per dtype (-1 for int32 top-k ids, 0.0 for float32 weights)."
    ),
    imports=("import torch",),
    functions=(make_inputs, scalars),
)


ENTRY = CatalogEntry(
    short_name="fill_padded_rows",
    op_id="moe.fill_padded_rows",
    entry_point=f"{_MODULE}:_fill_padded_rows",
    kind="triton",
    signature=Signature(
        dims=[Dim(name="T", meaning="padded tokens (the captured batch size)"), Dim(name="K", meaning="top-k")],
        tensors=[
            TensorArg(name="x", role="inplace", shape=["T", "K"], dtype="{dtype}", align_bytes=4),
            TensorArg(name="num_token_non_padded", role="input", shape=[], dtype="int32", align_bytes=4,
                      generated=True),
        ],
        scalars=[ScalarArg(name="fill_value", type="float", default=-1,
                           meaning="-1 for top-k ids (int32), 0.0 for top-k weights (float32)")],
        dtypes=["int32", "float32"],
        relations=["x[r, :] = fill_value for r >= num_token_non_padded; other rows untouched",
                   "0 <= num_token_non_padded <= T"],
        returns=[],
    ),
    reference=REFERENCE,
    shapes=_shapes,
    call=["x", "num_token_non_padded", "fill_value"],
    wrapper=f"{_MODULE}:_fill_padded_rows",
    tolerances=exact_tolerances(["int32", "float32"]),
    callsite_modules=(_MODULE, _TOPK),
    serving_sites={f"{_TOPK}:_fill_padded_rows": "top-k id masking (non-int32 ids or fill != -1) and top-k weight "
                   "zeroing of padded CUDA-graph rows"},
    inputs=INPUTS,
    inputs_scalars=True,
    notes=["Values are copied or filled: compared exactly."],
)

