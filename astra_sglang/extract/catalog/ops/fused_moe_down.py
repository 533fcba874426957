"""The fused MoE down-projection: SGLang's Triton ``fused_moe_kernel`` called for w2, each row times its routing
weight.

After the up-projection and SiLU-and-mul, ``fused_experts_impl`` calls ``invoke_fused_moe_kernel`` again on the
same moe_align sort: A is the activated intermediate, one row per (token, slot) pair (top_k = 1), B is w2, and
the kernel scales each output row by the pair's routing weight (mul_routed_weight) into ``[T, TK, hidden]``,
which moe_sum_reduce then sums over the slots. At decode every touched expert's w2 is read once for a few rows:
this call and the up-projection are the MoE layer's weight traffic. The config is SGLang's down config for the
layer's token count on each served GPU (its ``_down`` tuned JSON where one exists, else the up config, as
``down_config or config``), with the up call's BLOCK_SIZE_M.
"""

from __future__ import annotations

import torch
import triton.language as tl

from astra_sglang.contract.op import CallSite, Dim, ShapeCase, Signature, TensorArg, call_form_op_id
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
    return served_shapes("down", "w2 down-projection with routing weights")


_COMPUTE = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}


def reference(**args):
    a, b, ids = args["A"].float(), args["B"], args["topk_ids"].long()
    w = args["topk_weights"].float().reshape(-1, 1)
    t, tk = ids.shape
    out = torch.zeros(t * tk, b.shape[1], dtype=torch.float32, device=a.device)
    scale = torch.zeros_like(out)
    rows = torch.arange(t * tk, device=a.device)
    flat = ids.reshape(-1)
    for e in torch.unique(flat).tolist():
        pick = rows[flat == e]
        wb = b[e].float()
        x = a[pick]
        out[pick] = (x @ wb.T) * w[pick]
        scale[pick] = (x.abs() @ wb.abs().T) * w[pick].abs()
    return {"C": out.reshape(t, tk, -1), "C:scale": scale.reshape(t, tk, -1)}


def call(invoke, A, B, C, topk_weights, topk_ids, sorted_token_ids, expert_ids, num_tokens_post_padded,
         BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, num_warps, num_stages):
    config = {"BLOCK_SIZE_M": BLOCK_SIZE_M, "BLOCK_SIZE_N": BLOCK_SIZE_N, "BLOCK_SIZE_K": BLOCK_SIZE_K,
              "GROUP_SIZE_M": GROUP_SIZE_M, "num_warps": num_warps, "num_stages": num_stages}
    invoke(A, B, None, C, None, None, None, topk_weights, topk_ids, sorted_token_ids, expert_ids,
           num_tokens_post_padded, True, 1, config, compute_type=_COMPUTE[A.dtype],
           use_fp8_w8a8=False, use_int8_w8a8=False, use_int8_w8a16=False, use_int4_w4a16=False,
           per_channel_quant=False, block_shape=None, a_use_tma=False, b_use_tma=False, filter_expert=False,
           fuse_sum_all_reduce=False, router_topk=topk_ids.shape[1])


REFERENCE = FileText(
    doc=(
        "Reference for fused_moe_down (astra-sglang, written; unquantized w2 down-projection, routing weight on the\n"
        "output): C[t, s, :] = topk_weights[t, s] * (A[t*TK + s] @ B[topk_ids[t, s]].T) in float32, one expert at a\n"
        "time. 'C:scale' is |w| * (|A| @ |B_e|^T), the size of the terms each output sums: the checker's relative\n"
        "bound uses it where the dot product cancels."
    ),
    imports=("import torch",),
    functions=(reference,),
)

INPUTS = FileText(
    doc=(
        "Inputs for fused_moe_down (astra-sglang, written): a reference routing, then moe_align.\n"
        "\n"
        "Router logits are normal with a mild per-expert bias (hotter and idler experts, as a trained router spreads a\n"
        "batch: most experts touched once the batch is large, as in SGLang's forward); each token\n"
        "takes the top-TK experts of softmax(logits) with renormalized weights (float32). sorted_token_ids /\n"
        "expert_ids / num_tokens_post_padded are what moe_align_block_size gives for BLOCK_SIZE_M = BM: per expert, its\n"
        "flat (token, slot) indices ascending, padded with the sentinel T*TK to a multiple of BM; expert_ids[j] is the\n"
        "expert of block j (-1 past the last block, which the kernel never reads). A, the activated intermediate, is\n"
        "drawn by the harness like any input.\n"
    ),
    imports=("import torch",),
    constants=("ROUTER_BIAS",),
    functions=(make_inputs, scalars),
)

ADAPTER = FileText(
    doc=(
        "How SGLang's Triton MoE runner calls invoke_fused_moe_kernel for unquantized w2 (astra-sglang, written):\n"
        "the config dict SGLang picked for this shape and the Triton compute dtype of the activations, which a call\n"
        "list cannot hold (fused_experts_impl's second call: no bias or scales, mul_routed_weight = not\n"
        "apply_router_weight_on_input = True, top_k = 1, router_topk = TK, TMA and the fused sum/all-reduce off,\n"
        "filter_expert False: every expert is local)."
    ),
    imports=("import torch", "import triton.language as tl"),
    constants=("_COMPUTE",),
    functions=(call,),
)


ENTRY = CatalogEntry(
    short_name="fused_moe_down",
    op_id=call_form_op_id(f"{_MODULE}:invoke_fused_moe_kernel", "fused_moe_down"),  # the w2 form of fused_moe_kernel's
    entry_point=f"{_MODULE}:invoke_fused_moe_kernel",
    kind="triton",
    signature=Signature(
        dims=[
            *ROUTING_DIMS,
            Dim(name="H", meaning="hidden size: w2 rows per expert, the output width", multiple_of=8),
            Dim(name="I", meaning="moe_intermediate / TP: w2's inner dim, the activated intermediate's width",
                multiple_of=8),
            *CONFIG_DIMS,
        ],
        tensors=[
            TensorArg(name="A", role="input", shape=["T*TK", "I"], dtype="{dtype}"),
            TensorArg(name="B", role="input", shape=["E", "H", "I"], dtype="{dtype}",
                      moved=["distinct(topk_ids)", "H", "I"]),  # only the experts the routing touches
            TensorArg(name="C", role="output", shape=["T", "TK", "H"], dtype="{dtype}"),
            *ROUTING_TENSORS,
        ],
        scalars=CONFIG_SCALARS,
        dtypes=["bfloat16", "float16"],
        relations=[
            "C[t, s] = topk_weights[t, s] * (A[t*TK + s] @ B[topk_ids[t, s]]^T) (fp32 accumulation and weighting, "
            "stored in the activation dtype); the sum over s is the next kernel's (moe_sum_reduce)",
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
            note="read from source: fused_experts_impl's second call per MoE layer (w2: mul_routed_weight True, "
            "top_k 1, router_topk = TK, down_config or config), into intermediate_cache3 [T, TK, hidden] that "
            "moe_combine_topk sums; the first call (w1) is the fused_moe_kernel contract",
        ),
    ],
    notes=[
        "pinned call: unquantized bf16/fp16 down-projection, routing weight applied to the output "
        "(apply_router_weight_on_input False), no TMA (SGLang's H200 and H100 down configs carry none at these "
        "token counts; the H100's asks for it from M=4096), "
        "fused sum/all-reduce off (SGLang's default); fp8/int8/int4 are not covered",
        "config per case = try_get_optimal_moe_config(return_down_config=True) on the GPU its served-on tag "
        "names, H200 and H100 (the tuned _down JSON "
        "of this Triton version, else the newest, nearest M, BLOCK_SIZE_M forced to the up config's; else the up "
        "config); held-out shapes draw the config dims from the values the cases use",
        "a patch on invoke_fused_moe_kernel serves this contract only for calls of this form (mul_routed_weight "
        "True, top_k 1, no scales, no TMA): its guard must say so, since the up call goes through the same wrapper",
    ],
)
