"""compute_position_triton: the positions of every extend token and each request's start in the flat
token stream (``ForwardBatch`` init, Triton ``attention/position.py``).
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import Dim, ScalarArg, ShapeCase, Signature, TensorArg
from astra_sglang.extract.catalog._ragged_batch import _lengths
from astra_sglang.extract.catalog.base import CatalogEntry, exact_tolerances
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import case, dedup

_POS = "sglang.kernels.ops.attention.position"


def _position_shapes() -> list[ShapeCase]:
    cases = [case(["prefill"], f"extend batch of {b} requests x {s} tokens", B=b, S=s)
             for b, s in ((1, 512), (4, 1024), (8, 2048), (16, 512), (64, 128), (2, 8192))]
    cases += [case(["decode"], f"speculative verify: {b} requests x {s} draft tokens", B=b, S=s)
              for b, s in ((8, 4), (32, 4), (64, 8), (256, 2))]
    cases += [case(["edge"], "edge: one token", B=1, S=1),
              case(["edge"], "edge: many requests (the kernel sums the lengths before it serially)", B=512, S=3)]
    return dedup(cases)


def reference(**args):
    prefix, lens = args["extend_prefix_lens"].long(), args["extend_seq_lens"].long()
    positions = torch.cat([torch.arange(int(p), int(p) + int(n), device=lens.device) for p, n in zip(prefix, lens)])
    start = torch.zeros_like(lens)
    start[1:] = torch.cumsum(lens[:-1], 0)
    return {"positions": positions, "extend_start_loc": start.to(torch.int32)}


def make_inputs(dims, dtype, gen, device):
    b, s = dims["B"], dims["S"]
    lens = _lengths(b, s, dims["S"] * 3, gen, device)
    prefix = torch.randint(0, 4096, (b,), generator=gen, device=device)
    prefix = torch.where(torch.rand(b, generator=gen, device=device) < 0.3, torch.zeros_like(prefix), prefix)
    return {"extend_prefix_lens": prefix.to(torch.int32), "extend_seq_lens": lens.to(torch.int32)}


def scalars(dims, dtype):
    return {"extend_seq_lens_sum": dims["B"] * dims["S"]}


REFERENCE = FileText(
    doc=(
        "Reference for compute_position_triton (astra-sglang, written; restates SGLang's\n"
        "compute_position_torch)."
    ),
    imports=("import torch",),
    functions=(reference,),
)

INPUTS = FileText(
    doc=(
        "Inputs for compute_position_triton (astra-sglang, written): an extend batch of B requests with mixed\n"
        "extend lengths summing to B*S (int32, like ForwardBatch's), and cached prefix lengths (0 for new requests)."
    ),
    imports=("import torch",),
    functions=(_lengths, make_inputs, scalars),
)


ENTRY = CatalogEntry(
    short_name="compute_position_triton",
    op_id="attention.compute_position_triton",
    entry_point=f"{_POS}:compute_position_triton",
    kind="triton",
    signature=Signature(
        dims=[Dim(name="B", meaning="requests"), Dim(name="S", meaning="mean extend tokens per request")],
        tensors=[
            TensorArg(name="extend_prefix_lens", role="input", shape=["B"], dtype="int32", align_bytes=4,
                      generated=True),
            TensorArg(name="extend_seq_lens", role="input", shape=["B"], dtype="int32", align_bytes=4,
                      generated=True),
            TensorArg(name="positions", role="output", shape=["B*S"], dtype="int64", align_bytes=8),
            TensorArg(name="extend_start_loc", role="output", shape=["B"], dtype="int32", align_bytes=4),
        ],
        scalars=[ScalarArg(
            name="extend_seq_lens_sum", type="int", meaning="sum(extend_seq_lens) (a host int in SGLang)")],
        dtypes=["int32"],
        relations=["positions[start[b] + i] = extend_prefix_lens[b] + i for i < extend_seq_lens[b]",
                   "extend_start_loc[b] = sum(extend_seq_lens[:b])"],
        returns=["positions", "extend_start_loc"],
    ),
    reference=REFERENCE,
    shapes=_position_shapes,
    call=["extend_prefix_lens", "extend_seq_lens", "extend_seq_lens_sum"],
    wrapper=f"{_POS}:compute_position_triton",
    tolerances=exact_tolerances(["int32"]),
    forward_native="sglang.srt.model_executor.forward_batch_info:compute_position_torch",
    callsite_modules=(_POS, "sglang.srt.model_executor.forward_batch_info"),
    serving_sites={"sglang.srt.model_executor.forward_batch_info:compute_position_triton":
                   "ForwardBatch.init_new -> compute_position for every extend batch with a Triton-capable backend"},
    inputs=INPUTS,
    inputs_scalars=True,
    notes=["Integer outputs: compared exactly."],
)
