"""The fused MoE GEMM: SGLang's Triton ``fused_moe_kernel`` through ``invoke_fused_moe_kernel``, bf16/fp16 weights.

Every (token, slot) pair of a routed batch multiplies its token's hidden row by its expert's weight matrix; the
kernel runs one expert per BLOCK_SIZE_M block of ``sorted_token_ids`` (moe_align's output). This folder pins the
up-projection call SGLang's Triton MoE runner makes for unquantized weights (``fused_experts_impl``: w1, no
bias, no router weight on the input, c_sorted / TMA off as the shipped configs leave them, every expert local),
with the config SGLang picks on each served GPU for that model, split and batch (its tuned JSON, nearest M).

The wrapper takes a config dict and a Triton compute dtype, which no call list can hold: the op folder's
``adapter.py`` (ours) builds both from the contract's scalars and the tensors' dtype.
"""

from __future__ import annotations

import torch
import triton.language as tl

from astra_sglang.contract.op import CallSite, Dim, ShapeCase, Signature, TensorArg
from astra_sglang.extract.catalog._fused_moe import (
    CALL_TAIL,
    CONFIG_DIMS,
    CONFIG_RELATION,
    CONFIG_SCALARS,
    CONFIG_SPACE,
    ROUTING_DIMS,
    ROUTING_RELATION,
    ROUTING_TENSORS,
    make_inputs,
    scalars,
    served_shapes,
)
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.catalog.source_text import FileText

_MODULE = "sglang.kernels.ops.moe.fused_moe_triton_kernels"
_RUNNER = "sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe"


def _shapes() -> list[ShapeCase]:
    return served_shapes("up", "w1 up-projection")


_COMPUTE = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}


def reference(**args):
    a, b, ids = args["A"].float(), args["B"], args["topk_ids"].long()
    t, tk = ids.shape
    out = torch.zeros(t * tk, b.shape[1], dtype=torch.float32, device=a.device)
    scale = torch.zeros_like(out)
    rows = torch.arange(t * tk, device=a.device)
    flat = ids.reshape(-1)
    for e in torch.unique(flat).tolist():
        pick = rows[flat == e]
        w = b[e].float()
        x = a[pick // tk]
        out[pick] = x @ w.T
        scale[pick] = x.abs() @ w.abs().T
    return {"C": out.reshape(t, tk, -1), "C:scale": scale.reshape(t, tk, -1)}


def call(invoke, A, B, C, topk_weights, topk_ids, sorted_token_ids, expert_ids, num_tokens_post_padded,
         BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, num_warps, num_stages):
    config = {"BLOCK_SIZE_M": BLOCK_SIZE_M, "BLOCK_SIZE_N": BLOCK_SIZE_N, "BLOCK_SIZE_K": BLOCK_SIZE_K,
              "GROUP_SIZE_M": GROUP_SIZE_M, "num_warps": num_warps, "num_stages": num_stages}
    invoke(A, B, None, C, None, None, None, topk_weights, topk_ids, sorted_token_ids, expert_ids,
           num_tokens_post_padded, False, topk_ids.shape[1], config, compute_type=_COMPUTE[A.dtype],
           use_fp8_w8a8=False, use_int8_w8a8=False, use_int8_w8a16=False, use_int4_w4a16=False,
           per_channel_quant=False, block_shape=None, c_sorted=False, b_use_tma=False, filter_expert=False)


REFERENCE = FileText(
    doc=(
        "Reference for fused_moe_kernel (astra-sglang, written; unquantized up-projection, no router weight):\n"
        "C[t, s, :] = A[t] @ B[topk_ids[t, s]].T in float32, one expert at a time. 'C:scale' is |A| @ |B_e|^T, the size\n"
        "of the terms each output sums: the checker's relative bound uses it where the dot product cancels."
    ),
    imports=("import torch",),
    functions=(reference,),
)

INPUTS = FileText(
    doc=(
        "Inputs for fused_moe_kernel (astra-sglang, written): a reference routing, then moe_align.\n"
        "\n"
        "Router logits are normal with a mild per-expert bias (hotter and idler experts, as a trained router spreads a\n"
        "batch: most experts touched once the batch is large, as in SGLang's forward); each token\n"
        "takes the top-TK experts of softmax(logits) with renormalized weights (float32). sorted_token_ids /\n"
        "expert_ids / num_tokens_post_padded are what moe_align_block_size gives for BLOCK_SIZE_M = BM: per expert, its\n"
        "flat (token, slot) indices ascending, padded with the sentinel T*TK to a multiple of BM; expert_ids[j] is the\n"
        "expert of block j (-1 past the last block, which the kernel never reads).\n"
    ),
    imports=("import torch",),
    constants=("ROUTER_BIAS",),
    functions=(make_inputs, scalars),
)

ADAPTER = FileText(
    doc=(
        "How SGLang's Triton MoE runner calls invoke_fused_moe_kernel for unquantized w1 (astra-sglang, written):\n"
        "the config dict SGLang picked for this shape and the Triton compute dtype of the activations, which a call\n"
        "list cannot hold (fused_experts_impl: no bias or scales, apply_router_weight_on_input=False, top_k = TK,\n"
        "c_sorted / b_use_tma False, filter_expert False: every expert is local)."
    ),
    imports=("import torch", "import triton.language as tl"),
    constants=("_COMPUTE",),
    functions=(call,),
)


ENTRY = CatalogEntry(
    short_name="fused_moe_kernel",
    op_id="moe.fused_moe_kernel",
    entry_point=f"{_MODULE}:invoke_fused_moe_kernel",
    kind="triton",
    signature=Signature(
        dims=[
            *ROUTING_DIMS,
            Dim(name="N", meaning="w1 rows per expert = 2 * moe_intermediate / TP (gate and up)", multiple_of=2),
            Dim(name="K", meaning="hidden size", multiple_of=8),
            *CONFIG_DIMS,
        ],
        tensors=[
            TensorArg(name="A", role="input", shape=["T", "K"], dtype="{dtype}"),
            TensorArg(name="B", role="input", shape=["E", "N", "K"], dtype="{dtype}",
                      moved=["distinct(topk_ids)", "N", "K"]),  # only the experts the routing touches
            TensorArg(name="C", role="output", shape=["T", "TK", "N"], dtype="{dtype}"),
            *ROUTING_TENSORS,
        ],
        scalars=CONFIG_SCALARS,
        dtypes=["bfloat16", "float16"],
        relations=[
            "C[t, s] = A[t] @ B[topk_ids[t, s]]^T (fp32 accumulation, stored in the activation dtype)",
            ROUTING_RELATION,
            CONFIG_RELATION,
        ],
        returns=[],
    ),
    reference=REFERENCE,
    inputs=INPUTS,
    inputs_scalars=True,
    adapter=ADAPTER,
    shapes=_shapes,
    call=["A", "B", "C", *CALL_TAIL],
    wrapper=f"{_MODULE}:invoke_fused_moe_kernel",
    config_arg="config",
    config_space=CONFIG_SPACE,
    callsite_modules=(_MODULE,),
    serving_sites={f"{_MODULE}:invoke_fused_moe_kernel": "the definition"},
    extra_sites=[
        CallSite(
            module=_RUNNER, attr="invoke_fused_moe_kernel", binds="caller", target=None, same_function=True,
            reached_by_serving=True,
            note="read from source: fused_experts_impl (the Triton MoE runner, the default MoE backend for "
            "unquantized Mixtral / Qwen-MoE on CUDA) calls it twice per layer: w1 (this contract: "
            "apply_router_weight_on_input False, top_k = TK) and w2 (mul_routed_weight True, top_k 1: the "
            "fused_moe_down contract)",
        ),
    ],
    notes=[
        "pinned call: unquantized bf16/fp16 up-projection; the w2 down-projection (mul_routed_weight, top_k=1) "
        "is fused_moe_down; fp8/int8/int4 are not covered",
        "config per case = try_get_optimal_moe_config on the GPU its served-on tag names, H200 and H100 (tuned "
        "JSON of this Triton version, else the newest; the nearest M); held-out shapes draw the config dims from "
        "the values the cases use",
    ],
)

