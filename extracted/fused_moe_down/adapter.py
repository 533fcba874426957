"""How SGLang's Triton MoE runner calls invoke_fused_moe_kernel for unquantized w2 (astra-sglang, written):
the config dict SGLang picked for this shape and the Triton compute dtype of the activations, which a call
list cannot hold (fused_experts_impl's second call: no bias or scales, mul_routed_weight = not
apply_router_weight_on_input = True, top_k = 1, router_topk = TK, TMA and the fused sum/all-reduce off,
filter_expert False: every expert is local)."""

import torch
import triton.language as tl

_COMPUTE = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}


def call(invoke, A, B, C, topk_weights, topk_ids, sorted_token_ids, expert_ids, num_tokens_post_padded,
         BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, num_warps, num_stages):
    config = {"BLOCK_SIZE_M": BLOCK_SIZE_M, "BLOCK_SIZE_N": BLOCK_SIZE_N, "BLOCK_SIZE_K": BLOCK_SIZE_K,
              "GROUP_SIZE_M": GROUP_SIZE_M, "num_warps": num_warps, "num_stages": num_stages}
    invoke(A, B, None, C, None, None, None, topk_weights, topk_ids, sorted_token_ids, expert_ids,
           num_tokens_post_padded, True, 1, config, compute_type=_COMPUTE[A.dtype],
           use_fp8_w8a8=False, use_int8_w8a8=False, use_int8_w8a16=False, use_int4_w4a16=False,
           per_channel_quant=False, block_shape=None, a_use_tma=False, b_use_tma=False, filter_expert=False,
           fuse_sum_all_reduce=False, router_topk=topk_ids.shape[1])
