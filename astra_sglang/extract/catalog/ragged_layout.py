"""Ragged <-> padded batch layout kernels (Triton ``attention/position.py`` and ``attention/pad.py``).

compute_position_triton: the positions of every extend token (prefix_len + 0..extend_len-1) and each request's
start in the flat token stream, for every extend batch (``ForwardBatch`` init). pad_draft_extend_query /
unpad_draft_extend_output: the TRT-LLM MLA backend's draft-extend / ragged-verify path copies a ragged query
stream [sum(lens), H, D] into a padded [B, M, H, D] block and the attention output back.
"""

from __future__ import annotations

from astra_sglang.contract.op import Dim, ScalarArg, ShapeCase, Signature, TensorArg
from astra_sglang.extract.catalog.base import CatalogEntry, exact_tolerances
from astra_sglang.extract.shapes import case, dedup

_POS = "sglang.kernels.ops.attention.position"
_PAD = "sglang.kernels.ops.attention.pad"
_MLA = "sglang.srt.layers.attention.trtllm_mla_backend"

# A batch of B requests with B*S tokens in all: every request gets 1..S+E tokens (mixed lengths that sum to
# exactly B*S, so the ragged tensors have a shape the signature can state).
LENGTHS_HELPER = '''

def _lengths(b, s, e, gen, device):
    """B lengths in [1, s+e] summing to b*s: start even, then move tokens between random pairs."""
    lens = torch.full((b,), s, dtype=torch.int64)
    if b > 1 and (s > 1 or e > 0):
        pairs = torch.randint(0, b, (4 * b * s, 2), generator=gen, device=device).cpu()
        for i, j in pairs.tolist():
            if i != j and lens[i] < s + e and lens[j] > 1:
                lens[i] += 1
                lens[j] -= 1
    return lens.to(device)
'''

_POSITION_INPUTS = '''"""Inputs for compute_position_triton (astra-sglang, written): an extend batch of B requests with mixed
extend lengths summing to B*S (int32, like ForwardBatch's), and cached prefix lengths (0 for new requests)."""

import torch
''' + LENGTHS_HELPER + '''

def make_inputs(dims, dtype, gen, device):
    b, s = dims["B"], dims["S"]
    lens = _lengths(b, s, dims["S"] * 3, gen, device)
    prefix = torch.randint(0, 4096, (b,), generator=gen, device=device)
    prefix = torch.where(torch.rand(b, generator=gen, device=device) < 0.3, torch.zeros_like(prefix), prefix)
    return {"extend_prefix_lens": prefix.to(torch.int32), "extend_seq_lens": lens.to(torch.int32)}


def scalars(dims, dtype):
    return {"extend_seq_lens_sum": dims["B"] * dims["S"]}
'''

_PAD_INPUTS = '''"""Inputs for {name} (astra-sglang, written): B draft-extend requests with accepted lengths in [1, M]
(M = S + E draft slots) summing to B*S, and their prefix sum cu_seqlens_q (int32, [B+1], as SGLang's
qo_indptr)."""

import torch
''' + LENGTHS_HELPER + '''

def make_inputs(dims, dtype, gen, device):
    lens = _lengths(dims["B"], dims["S"], dims["E"], gen, device)
    cu = torch.zeros(dims["B"] + 1, dtype=torch.int64, device=device)
    cu[1:] = torch.cumsum(lens, 0)
    return {{"seq_lens_q": lens.to(torch.int32), "cu_seqlens_q": cu.to(torch.int32)}}
'''

_PAD_REFERENCE = '''"""Reference for pad_draft_extend_query (astra-sglang, written): request b's tokens
q[cu[b] : cu[b] + len[b]] go to padded_q[b, :len[b]]; the rest of padded_q is left as it was."""


def reference(**args):
    out = args["padded_q"].clone()
    q, lens, cu = args["q"], args["seq_lens_q"].tolist(), args["cu_seqlens_q"].tolist()
    for b, n in enumerate(lens):
        out[b, :n] = q[cu[b]:cu[b] + n]
    return {"padded_q": out}
'''

_UNPAD_REFERENCE = '''"""Reference for unpad_draft_extend_output (astra-sglang, written): output[cu[b] + i] = raw_out[b, i]
for i < len[b]: the ragged stream of every request's first len[b] rows."""

import torch


def reference(**args):
    raw, lens = args["raw_out"], args["seq_lens_q"].tolist()
    return {"output": torch.cat([raw[b, :n] for b, n in enumerate(lens)], 0)}
'''

_COPY_DTYPES = ["bfloat16", "float16", "float32"]
# A copy moves bits: any difference is a wrong element, so tolerance 0 for every dtype.
_COPY_TOL = exact_tolerances(_COPY_DTYPES)


def _position_shapes() -> list[ShapeCase]:
    cases = [case(["prefill"], f"extend batch of {b} requests x {s} tokens", B=b, S=s)
             for b, s in ((1, 512), (4, 1024), (8, 2048), (16, 512), (64, 128), (2, 8192))]
    cases += [case(["decode"], f"speculative verify: {b} requests x {s} draft tokens", B=b, S=s)
              for b, s in ((8, 4), (32, 4), (64, 8), (256, 2))]
    cases += [case(["edge"], "edge: one token", B=1, S=1),
              case(["edge"], "edge: many requests (the kernel sums the lengths before it serially)", B=512, S=3)]
    return dedup(cases)


def _pad_shapes() -> list[ShapeCase]:
    # DeepSeek-V3 MLA: 128 query heads split by TP; q head_dim 576 (512 latent + 64 rope), v_head_dim 512.
    cases: list[ShapeCase] = []
    for i, (tp, b) in enumerate(((1, 8), (2, 32), (4, 64), (8, 128), (8, 1), (4, 16))):
        s, e = (2, 2) if i % 2 else (3, 1)
        cases.append(case(["decode"], f"DeepSeek-V3 TP{tp} MTP draft extend, {b} requests", B=b, S=s, E=e,
                          H=128 // tp, D=576))
    cases += [case(["edge"], "edge: one request, all draft tokens accepted", B=1, S=4, E=0, H=16, D=576),
              case(["edge"], "edge: head_dim not a multiple of the 64-wide block", B=5, S=2, E=3, H=8, D=100)]
    return dedup(cases)


def _unpad_shapes() -> list[ShapeCase]:
    return [ShapeCase(dims={**c.dims, "D": 512 if c.dims["D"] == 576 else c.dims["D"]}, tags=c.tags,
                      source=c.source.replace("draft extend", "draft extend output (v_head_dim 512)"))
            for c in _pad_shapes()]


def _pad_dims() -> list[Dim]:
    return [Dim(name="B", meaning="requests"), Dim(name="S", meaning="mean accepted tokens per request"),
            Dim(name="E", meaning="draft slots beyond S (M = S + E is the padded length)", min=0),
            Dim(name="H", meaning="query heads (after TP)"), Dim(name="D", meaning="head dim")]


COMPUTE_POSITION = CatalogEntry(
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
    reference='''"""Reference for compute_position_triton (astra-sglang, written; restates SGLang's
compute_position_torch)."""

import torch


def reference(**args):
    prefix, lens = args["extend_prefix_lens"].long(), args["extend_seq_lens"].long()
    positions = torch.cat([torch.arange(int(p), int(p) + int(n), device=lens.device) for p, n in zip(prefix, lens)])
    start = torch.zeros_like(lens)
    start[1:] = torch.cumsum(lens[:-1], 0)
    return {"positions": positions, "extend_start_loc": start.to(torch.int32)}
''',
    shapes=_position_shapes,
    call=["extend_prefix_lens", "extend_seq_lens", "extend_seq_lens_sum"],
    wrapper=f"{_POS}:compute_position_triton",
    tolerances=exact_tolerances(["int32"]),
    forward_native="sglang.srt.model_executor.forward_batch_info:compute_position_torch",
    callsite_modules=(_POS, "sglang.srt.model_executor.forward_batch_info"),
    serving_sites={"sglang.srt.model_executor.forward_batch_info:compute_position_triton":
                   "ForwardBatch.init_new -> compute_position for every extend batch with a Triton-capable backend"},
    inputs=_POSITION_INPUTS,
    inputs_scalars=True,
    notes=["Integer outputs: compared exactly."],
)

PAD_DRAFT_EXTEND_QUERY = CatalogEntry(
    short_name="pad_draft_extend_query",
    op_id="attention.pad_draft_extend_query",
    entry_point=f"{_PAD}:pad_draft_extend_query",
    kind="triton",
    signature=Signature(
        dims=_pad_dims(),
        tensors=[
            TensorArg(name="q", role="input", shape=["B*S", "H", "D"], dtype="{dtype}"),
            TensorArg(name="padded_q", role="inplace", shape=["B", "S+E", "H", "D"], dtype="{dtype}"),
            TensorArg(name="seq_lens_q", role="input", shape=["B"], dtype="int32", align_bytes=4, generated=True),
            TensorArg(name="cu_seqlens_q", role="input", shape=["B+1"], dtype="int32", align_bytes=4,
                      generated=True),
        ],
        dtypes=_COPY_DTYPES,
        relations=["padded_q[b, i] = q[cu_seqlens_q[b] + i] for i < seq_lens_q[b]; other rows untouched",
                   "1 <= seq_lens_q[b] <= S+E; cu_seqlens_q = [0, cumsum(seq_lens_q)]"],
        returns=["padded_q"],
    ),
    reference=_PAD_REFERENCE,
    shapes=_pad_shapes,
    call=["q", "padded_q", "seq_lens_q", "cu_seqlens_q"],
    wrapper=f"{_PAD}:pad_draft_extend_query",
    tolerances=_COPY_TOL,
    callsite_modules=(_PAD,),
    serving_sites={f"{_MLA}:pad_draft_extend_query_triton": "TRTLLMMLABackend.pad_draft_extend_query (draft "
                   "extend and ragged verify; padded_q is torch.zeros there)"},
    inputs=_PAD_INPUTS.format(name="pad_draft_extend_query"),
    notes=["A copy: tolerance 0.", "SGLang passes a zeroed padded_q; the contract states the kernel leaves "
           "unwritten rows as they were, so padded_q is in-place and its other rows are checked unchanged."],
)

UNPAD_DRAFT_EXTEND_OUTPUT = CatalogEntry(
    short_name="unpad_draft_extend_output",
    op_id="attention.unpad_draft_extend_output",
    entry_point=f"{_PAD}:unpad_draft_extend_output",
    kind="triton",
    signature=Signature(
        dims=_pad_dims(),
        tensors=[
            TensorArg(name="raw_out", role="input", shape=["B", "S+E", "H", "D"], dtype="{dtype}"),
            TensorArg(name="cu_seqlens_q", role="input", shape=["B+1"], dtype="int32", align_bytes=4,
                      generated=True),
            TensorArg(name="seq_lens_q", role="input", shape=["B"], dtype="int32", align_bytes=4, generated=True),
            TensorArg(name="output", role="output", shape=["B*S", "H", "D"], dtype="{dtype}"),
        ],
        scalars=[ScalarArg(
            name="sum_seq_lens_q", type="int", meaning="sum(seq_lens_q), a host int")],
        dtypes=_COPY_DTYPES,
        relations=["output[cu_seqlens_q[b] + i] = raw_out[b, i] for i < seq_lens_q[b]"],
        returns=["output"],
    ),
    reference=_UNPAD_REFERENCE,
    shapes=_unpad_shapes,
    call=["raw_out", "cu_seqlens_q", "seq_lens_q", "sum_seq_lens_q"],
    wrapper=f"{_PAD}:unpad_draft_extend_output",
    tolerances=_COPY_TOL,
    callsite_modules=(_PAD,),
    serving_sites={f"{_MLA}:unpad_draft_extend_output_triton": "TRTLLMMLABackend.unpad_draft_extend_output "
                   "(without the CUDA-graph buffer the output is a fresh torch.empty)"},
    inputs=_PAD_INPUTS.format(name="unpad_draft_extend_output").replace(
        "def make_inputs", "def scalars(dims, dtype):\n    return {\"sum_seq_lens_q\": dims[\"B\"] * dims[\"S\"]}"
        "\n\n\ndef make_inputs"),
    inputs_scalars=True,
    notes=["A copy: tolerance 0."],
)

ENTRIES = [COMPUTE_POSITION, PAD_DRAFT_EXTEND_QUERY, UNPAD_DRAFT_EXTEND_OUTPUT]
