"""A hand-written (not model-written) fused-MoE GEMM for the patch tests: both of SGLang's call forms (w1; w2 with
the routing weight on each row) behind invoke_fused_moe_kernel's signature. A test vehicle, small and plain: no
performance claim is made for it."""

import triton
import triton.language as tl


@triton.jit
def _moe_gemm(a_ptr, b_ptr, c_ptr, w_ptr, sorted_ptr, expert_ptr, ntpp_ptr, N, K, num_valid, P, stride_am,
              stride_ak, stride_be, stride_bn, stride_bk, stride_cm, stride_cn, top_k: tl.constexpr,
              MUL_W: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, OUT: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    if pid_m * BM >= tl.load(ntpp_ptr):
        return
    offs_m = pid_m * BM + tl.arange(0, BM)
    tok = tl.load(sorted_ptr + offs_m, mask=offs_m < P, other=num_valid)
    valid = tok < num_valid
    e = tl.load(expert_ptr + pid_m).to(tl.int64)
    offs_n = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        offs_k = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + (tok // top_k)[:, None] * stride_am + offs_k[None, :] * stride_ak,
                    mask=valid[:, None] & (offs_k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + e * stride_be + offs_n[None, :] * stride_bn + offs_k[:, None] * stride_bk,
                    mask=(offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    if MUL_W:
        acc = acc * tl.load(w_ptr + tok, mask=valid, other=0.0)[:, None]
    tl.store(c_ptr + tok[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc.to(OUT),
             mask=valid[:, None] & (offs_n[None, :] < N))


def invoke_fused_moe_kernel(A, B, bias, C, A_scale, B_scale, B_zp, topk_weights, topk_ids, sorted_token_ids,
                            expert_ids, num_tokens_post_padded, mul_routed_weight, top_k, config, compute_type,
                            use_fp8_w8a8, use_int8_w8a8, use_int8_w8a16, use_int4_w4a16, per_channel_quant,
                            block_shape=None, filter_expert=True, router_topk=1, a_use_tma=False, b_use_tma=False,
                            c_sorted=False, fuse_sum_all_reduce=False):
    bm = config["BLOCK_SIZE_M"]
    _, n, k = B.shape
    p = sorted_token_ids.shape[0]
    grid = (triton.cdiv(p, bm), triton.cdiv(n, 32))
    _moe_gemm[grid](A, B, C, topk_weights, sorted_token_ids, expert_ids, num_tokens_post_padded, n, k,
                    topk_ids.numel(), p, A.stride(0), A.stride(1), B.stride(0), B.stride(1), B.stride(2),
                    C.stride(-2), C.stride(-1), top_k=top_k, MUL_W=mul_routed_weight, BM=bm, BN=32, BK=32,
                    OUT=compute_type)
