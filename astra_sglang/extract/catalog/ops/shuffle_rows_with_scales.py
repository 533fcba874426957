"""Gather quantized activation rows and their group scales through one map (Triton
``moe/shuffle_rows_with_scales.py``): the CUTLASS FP8 MoE's expansion of tokens into expert order.

``srt/layers/moe/cutlass_moe.py``: after per-token-group FP8 quantization (groups of 128), every token row is
repeated once per routed expert, in expert-sorted order: out[i] = src[dst2src_map[i]] for the values and the
scales alike.
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import Dim, ScalarArg, ShapeCase, Signature, TensorArg
from astra_sglang.extract.catalog.base import CatalogEntry, exact_tolerances
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import DECODE_T, PREFILL_T, case, dedup

_MODULE = "sglang.kernels.ops.moe.shuffle_rows_with_scales"
# hidden sizes of FP8 MoE models served by the CUTLASS path, top-k
_MOE = {"DeepSeek-V3": (7168, 8), "Qwen3-235B-A22B": (4096, 8), "Mixtral-8x7B": (4096, 2)}


def _shapes() -> list[ShapeCase]:
    cases = [case(["decode"], f"{name} top-{k}, {t} tokens", T=t, K=k, G=h // 128)
             for i, (name, (h, k)) in enumerate(_MOE.items()) for t in DECODE_T[i % 2::2]]
    cases += [case(["prefill"], f"{name} top-{k}, {t} tokens", T=t, K=k, G=h // 128)
              for (name, (h, k)), t in zip(_MOE.items(), PREFILL_T)]
    cases += [case(["edge", "decode"], "edge: one token, top-1", T=1, K=1, G=56),
              case(["edge"], "edge: row not a multiple of the 4096 tile", T=7, K=3, G=40)]
    return dedup(cases)


def reference(**args):
    m = args["dst2src_map"][:args["num_dst_rows"]].long()
    return {"q_out": args["q"][m], "scale_out": args["scale"][m]}


def make_inputs(dims, dtype, gen, device):
    t, k = dims["T"], dims["K"]
    experts = torch.randint(0, 256, (t * k,), generator=gen, device=device)
    order = torch.argsort(experts * (t * k) + torch.arange(t * k, device=device))
    return {"dst2src_map": (order // k).to(torch.int32)}


def scalars(dims, dtype):
    return {"num_dst_rows": dims["T"] * dims["K"]}


REFERENCE = FileText(
    doc="Reference for shuffle_rows_with_scales (astra-sglang, written): two row gathers by one map.",
    functions=(reference,),
)

INPUTS = FileText(
    doc=(
        "Inputs for shuffle_rows_with_scales (astra-sglang, written): the expert-order expansion map of a\n"
        "top-k routing: every token appears K times (once per routed expert), in an order given by sorting the\n"
        "(token, k) pairs by a random expert id, as cutlass_moe's a_map."
    ),
    imports=("import torch",),
    functions=(make_inputs, scalars),
)


ENTRY = CatalogEntry(
    short_name="shuffle_rows_with_scales",
    op_id="moe.shuffle_rows_with_scales",
    entry_point=f"{_MODULE}:shuffle_rows_with_scales",
    kind="triton",
    signature=Signature(
        dims=[Dim(name="T", meaning="tokens"), Dim(name="K", meaning="top-k"),
              Dim(name="G", meaning="scale groups per row (hidden / 128)")],
        tensors=[
            TensorArg(name="q", role="input", shape=["T", "G*128"], dtype="{dtype}", align_bytes=1),
            TensorArg(name="scale", role="input", shape=["T", "G"], dtype="float32", align_bytes=4),
            TensorArg(name="dst2src_map", role="input", shape=["T*K"], dtype="int32", align_bytes=4,
                      generated=True),
            TensorArg(name="q_out", role="output", shape=["T*K", "G*128"], dtype="{dtype}", align_bytes=1),
            TensorArg(name="scale_out", role="output", shape=["T*K", "G"], dtype="float32", align_bytes=4),
        ],
        scalars=[ScalarArg(name="num_dst_rows", type="int", meaning="T*K")],
        dtypes=["int8", "uint8"],
        relations=["q_out[i] = q[dst2src_map[i]]; scale_out[i] = scale[dst2src_map[i]]"],
        returns=["q_out", "scale_out"],
    ),
    reference=REFERENCE,
    shapes=_shapes,
    call=["q", "scale", "dst2src_map", "num_dst_rows"],
    wrapper=f"{_MODULE}:shuffle_rows_with_scales",
    tolerances=exact_tolerances(["int8", "uint8"]),
    callsite_modules=(_MODULE,),
    serving_sites={"sglang.srt.layers.moe.cutlass_moe:shuffle_rows_with_scales": "CUTLASS FP8 MoE: expanding "
                   "the quantized activations into expert order (read from source: CUDA-only module)"},
    inputs=INPUTS,
    inputs_scalars=True,
    notes=["Bytes moved, not interpreted: compared exactly. SGLang passes float8_e4m3fn values; the kernel "
           "views them as int8, so the 1-byte integer dtypes stand for them here."],
)

