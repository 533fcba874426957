# Copyright 2023-2024 SGLang Team
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
# ==============================================================================
"""
Memory-efficient split-KV attention for decoding (CUDA path).

Same two-stage scheme and split plan as SGLang's decode kernel (per-request
num_kv_splits, max_kv_splits partials), with a wider / deeper stage-1 KV gather
pipeline and a programmatic-dependent launch of the merge stage.

Memory-locality scheduling: the stage-1 grid can run head tiles fastest
(grid = (head tiles, splits, batch)), so the CTAs of one (request, split) run
together, share their kv_indices block in L2 and read the adjacent head slices
of the same KV slot rows back to back.  K/V tiles are streamed with an
evict-first L2 policy (each byte is read once), kv_indices with evict-last.
"""

import triton
import triton.language as tl
import torch

# Tunables (read on every call).
# TUNE frozen by astra-sglang tune: 14 bucket(s) in TUNED below; swept BLOCK_N=[32, 64], PREFETCH=[0, 1], HEAD_FASTEST=[0, 1], EVICT=[0, 1]
CONFIG = {'BLOCK_N': 64, 'PREFETCH': 0, 'HEAD_FASTEST': 0, 'EVICT': 1}
_MAX_GRID_YZ = 65535
_NUM_STAGES = 3

_MIN_BLOCK_KV = 32
_GROUPED_BLOCK_H = 16
_SMEM_BUDGET = 160 * 1024

_PDL_OK = [True]


def _grouped_head_tiles(head_num: int, kv_group_num: int) -> int:
    return triton.cdiv(head_num, min(_GROUPED_BLOCK_H, kv_group_num))


def _fit_pipeline(block_n: int, num_stages: int, row_bytes: int):
    """Shrink BLOCK_N / stages until the K+V stage buffers fit in shared memory."""
    while block_n > 16 and block_n * row_bytes * num_stages > _SMEM_BUDGET:
        block_n //= 2
    while num_stages > 1 and block_n * row_bytes * num_stages > _SMEM_BUDGET:
        num_stages -= 1
    return block_n, num_stages


@triton.jit
def tanh(x):
    # Tanh is just a scaled sigmoid
    return 2 * tl.sigmoid(2 * x) - 1


@triton.jit
def _fwd_kernel_stage1(
    Q,
    K_Buffer,
    V_Buffer,
    sm_scale,
    kv_indptr,
    kv_indices,
    Att_Out,
    Att_Lse,
    num_kv_splits,
    stride_qbs,
    stride_qh,
    stride_buf_kbs,
    stride_buf_kh,
    stride_buf_vbs,
    stride_buf_vh,
    stride_mid_ob,
    stride_mid_oh,
    stride_mid_os,
    kv_group_num: tl.constexpr,
    BLOCK_DMODEL: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MIN_BLOCK_KV: tl.constexpr,
    logit_cap: tl.constexpr,
    Lk: tl.constexpr,
    Lv: tl.constexpr,
    xai_temperature_len: tl.constexpr,
    HEAD_FASTEST: tl.constexpr,
    KV_EVICT: tl.constexpr,
    IDX_EVICT: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    if HEAD_FASTEST:
        cur_head = tl.program_id(0)
        split_kv_id = tl.program_id(1)
        cur_batch = tl.program_id(2).to(tl.int64)
    else:
        cur_batch = tl.program_id(0).to(tl.int64)
        cur_head = tl.program_id(1)
        split_kv_id = tl.program_id(2)

    cur_batch_kv_start_idx = tl.load(kv_indptr + cur_batch)
    cur_batch_seq_len = tl.load(kv_indptr + cur_batch + 1) - cur_batch_kv_start_idx
    kv_splits = tl.load(num_kv_splits + cur_batch)
    kv_len_per_split = (
        tl.cdiv(tl.cdiv(cur_batch_seq_len, kv_splits), MIN_BLOCK_KV) * MIN_BLOCK_KV
    )
    split_kv_start = kv_len_per_split * split_kv_id
    split_kv_end = tl.minimum(split_kv_start + kv_len_per_split, cur_batch_seq_len)

    # Empty splits exit before any setup work.
    if split_kv_end > split_kv_start:
        cur_kv_head = cur_head // kv_group_num

        offs_d = tl.arange(0, BLOCK_DMODEL)
        offs_dv = tl.arange(0, BLOCK_DV)
        mask_d = offs_d < Lk
        mask_dv = offs_dv < Lv

        if xai_temperature_len > 0:
            offs_qidx = cur_batch_seq_len - 1
            xai_temperature_scale = 1.0 / tl.log2(float(xai_temperature_len))
            _qtemp = tl.log2(offs_qidx.to(tl.float32)) * xai_temperature_scale
            xai_temperature_reg = tl.where(
                offs_qidx > xai_temperature_len, _qtemp, 1.0
            )

        off_q = cur_batch * stride_qbs + cur_head * stride_qh + offs_d

        e_max = -float("inf")
        e_sum = 0.0
        acc = tl.zeros([BLOCK_DV], dtype=tl.float32)

        q = tl.load(Q + off_q, mask=mask_d, other=0.0)
        for start_n in range(split_kv_start, split_kv_end, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            kv_loc = tl.load(
                kv_indices + cur_batch_kv_start_idx + offs_n,
                mask=offs_n < split_kv_end,
                other=0,
                eviction_policy=IDX_EVICT,
            )
            row_k = kv_loc * stride_buf_kbs + cur_kv_head * stride_buf_kh
            row_v = kv_loc * stride_buf_vbs + cur_kv_head * stride_buf_vh
            k = tl.load(
                K_Buffer + row_k[:, None] + offs_d[None, :],
                mask=(offs_n[:, None] < split_kv_end) & (mask_d[None, :]),
                other=0.0,
                eviction_policy=KV_EVICT,
            )
            v = tl.load(
                V_Buffer + row_v[:, None] + offs_dv[None, :],
                mask=(offs_n[:, None] < split_kv_end) & (mask_dv[None, :]),
                other=0.0,
                eviction_policy=KV_EVICT,
            )
            qk = tl.sum((q[None, :] * k).to(tl.float32), 1)
            qk *= sm_scale

            if logit_cap > 0:
                qk = logit_cap * tanh(qk / logit_cap)

            if xai_temperature_len > 0:
                qk *= xai_temperature_reg

            qk = tl.where(offs_n < split_kv_end, qk, float("-inf"))

            n_e_max = tl.maximum(tl.max(qk, 0), e_max)
            re_scale = tl.exp(e_max - n_e_max)
            p = tl.exp(qk - n_e_max)
            acc *= re_scale
            acc += tl.sum(p[:, None] * v, 0)

            e_sum = e_sum * re_scale + tl.sum(p, 0)
            e_max = n_e_max

        offs_mid_o = (
            cur_batch * stride_mid_ob
            + cur_head * stride_mid_oh
            + split_kv_id * stride_mid_os
            + offs_dv
        )
        tl.store(Att_Out + offs_mid_o, acc / e_sum, mask=(mask_dv))

        offs_mid_o_1 = (
            cur_batch * stride_mid_ob
            + cur_head * stride_mid_oh
            + split_kv_id * stride_mid_os
        ) // Lv
        tl.store(Att_Lse + offs_mid_o_1, e_max + tl.log(e_sum))

    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def _fwd_grouped_kernel_stage1(
    Q,
    K_Buffer,
    V_Buffer,
    sm_scale,
    kv_indptr,
    kv_indices,
    Att_Out,
    Att_Lse,
    num_kv_splits,
    stride_qbs,
    stride_qh,
    stride_buf_kbs,
    stride_buf_kh,
    stride_buf_vbs,
    stride_buf_vh,
    stride_mid_ob,
    stride_mid_oh,
    stride_mid_os,
    kv_group_num: tl.constexpr,
    q_head_num: tl.constexpr,
    BLOCK_DMODEL: tl.constexpr,
    BLOCK_DPE: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_H: tl.constexpr,
    MIN_BLOCK_KV: tl.constexpr,
    logit_cap: tl.constexpr,
    xai_temperature_len: tl.constexpr,
    Lk: tl.constexpr,
    Lv: tl.constexpr,
    HAS_MLA: tl.constexpr,
    PREFETCH: tl.constexpr,
    HEAD_FASTEST: tl.constexpr,
    KV_EVICT: tl.constexpr,
    IDX_EVICT: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    if HEAD_FASTEST:
        cur_head_id = tl.program_id(0)
        split_kv_id = tl.program_id(1)
        cur_batch = tl.program_id(2).to(tl.int64)
    else:
        cur_batch = tl.program_id(0).to(tl.int64)
        cur_head_id = tl.program_id(1)
        split_kv_id = tl.program_id(2)

    if BLOCK_H < kv_group_num:
        VALID_BLOCK_H: tl.constexpr = BLOCK_H
    else:
        VALID_BLOCK_H: tl.constexpr = kv_group_num

    cur_batch_kv_start_idx = tl.load(kv_indptr + cur_batch)
    cur_batch_seq_len = tl.load(kv_indptr + cur_batch + 1) - cur_batch_kv_start_idx
    kv_splits = tl.load(num_kv_splits + cur_batch)
    kv_len_per_split = (
        tl.cdiv(tl.cdiv(cur_batch_seq_len, kv_splits), MIN_BLOCK_KV) * MIN_BLOCK_KV
    )
    split_kv_start = kv_len_per_split * split_kv_id
    split_kv_end = tl.minimum(split_kv_start + kv_len_per_split, cur_batch_seq_len)

    # Empty splits exit before any setup work.
    if split_kv_end > split_kv_start:
        cur_kv_head = cur_head_id // tl.cdiv(kv_group_num, BLOCK_H)
        cur_head = cur_head_id * VALID_BLOCK_H + tl.arange(0, BLOCK_H)
        mask_h = cur_head < (cur_head_id + 1) * VALID_BLOCK_H
        mask_h = mask_h & (cur_head < q_head_num)

        offs_d = tl.arange(0, BLOCK_DMODEL)
        offs_dv = tl.arange(0, BLOCK_DV)
        mask_d = offs_d < Lk
        mask_dv = offs_dv < Lv

        if xai_temperature_len > 0:
            offs_qidx = cur_batch_seq_len - 1
            xai_temperature_scale = 1.0 / tl.log2(float(xai_temperature_len))
            _qtemp = tl.log2(offs_qidx.to(tl.float32)) * xai_temperature_scale
            xai_temperature_reg = tl.where(
                offs_qidx > xai_temperature_len, _qtemp, 1.0
            )

        offs_q = (
            cur_batch * stride_qbs + cur_head[:, None] * stride_qh + offs_d[None, :]
        )

        if BLOCK_DPE > 0:
            offs_dpe = BLOCK_DMODEL + tl.arange(0, BLOCK_DPE)
            mask_dpe = offs_dpe < Lk
            off_qpe = (
                cur_batch * stride_qbs
                + cur_head[:, None] * stride_qh
                + offs_dpe[None, :]
            )

        e_max = tl.zeros([BLOCK_H], dtype=tl.float32) - float("inf")
        e_sum = tl.zeros([BLOCK_H], dtype=tl.float32)
        acc = tl.zeros([BLOCK_H, BLOCK_DV], dtype=tl.float32)

        base_offs_k = cur_kv_head * stride_buf_kh + offs_d[:, None]
        if BLOCK_DPE > 0:
            base_offs_kpe = cur_kv_head * stride_buf_kh + offs_dpe[:, None]
        if not HAS_MLA:
            base_offs_v = cur_kv_head * stride_buf_vh + offs_dv[None, :]

        q = tl.load(Q + offs_q, mask=(mask_h[:, None]) & (mask_d[None, :]), other=0.0)
        q_k = q.to(K_Buffer.dtype.element_ty)
        if BLOCK_DPE > 0:
            qpe = tl.load(
                Q + off_qpe, mask=(mask_h[:, None]) & (mask_dpe[None, :]), other=0.0
            )
        idx_base = kv_indices + cur_batch_kv_start_idx
        if PREFETCH:
            offs_n0 = split_kv_start + tl.arange(0, BLOCK_N)
            kv_loc_next = tl.load(
                idx_base + offs_n0,
                mask=offs_n0 < split_kv_end,
                other=0,
                eviction_policy=IDX_EVICT,
            )
        for start_n in tl.range(split_kv_start, split_kv_end, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            if PREFETCH:
                kv_loc = kv_loc_next
                offs_nn = offs_n + BLOCK_N
                kv_loc_next = tl.load(
                    idx_base + offs_nn,
                    mask=offs_nn < split_kv_end,
                    other=0,
                    eviction_policy=IDX_EVICT,
                )
            else:
                kv_loc = tl.load(
                    idx_base + offs_n,
                    mask=offs_n < split_kv_end,
                    other=0,
                    eviction_policy=IDX_EVICT,
                )
            mask_n = offs_n < split_kv_end
            offs_buf_k = kv_loc[None, :] * stride_buf_kbs + base_offs_k
            k = tl.load(
                K_Buffer + offs_buf_k,
                mask=(mask_n[None, :]) & (mask_d[:, None]),
                other=0.0,
                eviction_policy=KV_EVICT,
            )
            if not HAS_MLA:
                offs_buf_v = kv_loc[:, None] * stride_buf_vbs + base_offs_v
                v = tl.load(
                    V_Buffer + offs_buf_v,
                    mask=(mask_n[:, None]) & (mask_dv[None, :]),
                    other=0.0,
                    eviction_policy=KV_EVICT,
                )
            qk = tl.dot(q_k, k)
            if BLOCK_DPE > 0:
                offs_buf_kpe = kv_loc[None, :] * stride_buf_kbs + base_offs_kpe
                kpe = tl.load(
                    K_Buffer + offs_buf_kpe,
                    mask=(mask_n[None, :]) & (mask_dpe[:, None]),
                    other=0.0,
                    eviction_policy=KV_EVICT,
                )
                qk += tl.dot(qpe, kpe.to(qpe.dtype))
            qk *= sm_scale

            if logit_cap > 0:
                qk = logit_cap * tanh(qk / logit_cap)

            if xai_temperature_len > 0:
                qk *= xai_temperature_reg[:, None]

            qk = tl.where(mask_h[:, None] & (mask_n[None, :]), qk, float("-inf"))
            if HAS_MLA:
                v = tl.trans(k)

            n_e_max = tl.maximum(tl.max(qk, 1), e_max)
            re_scale = tl.exp(e_max - n_e_max)
            p = tl.exp(qk - n_e_max[:, None])
            acc *= re_scale[:, None]
            acc += tl.dot(p.to(v.dtype), v)

            e_sum = e_sum * re_scale + tl.sum(p, 1)
            e_max = n_e_max

        offs_mid_o = (
            cur_batch * stride_mid_ob
            + cur_head[:, None] * stride_mid_oh
            + split_kv_id * stride_mid_os
            + offs_dv[None, :]
        )
        tl.store(
            Att_Out + offs_mid_o,
            acc / e_sum[:, None],
            mask=(mask_h[:, None]) & (mask_dv[None, :]),
        )

        offs_mid_o_1 = (
            cur_batch * stride_mid_ob
            + cur_head * stride_mid_oh
            + split_kv_id * stride_mid_os
        ) // Lv
        tl.store(Att_Lse + offs_mid_o_1, e_max + tl.log(e_sum), mask=mask_h)

    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def _fwd_kernel_stage2(
    Mid_O,
    Mid_O_1,
    O,
    v_scale,
    kv_indptr,
    num_kv_splits,
    sink_ptr,
    stride_mid_ob,
    stride_mid_oh,
    stride_mid_os,
    stride_obs,
    stride_oh,
    MAX_KV_SPLITS: tl.constexpr,
    MIN_BLOCK_KV: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    Lv: tl.constexpr,
    HAS_SINK: tl.constexpr,
    HEAD_FASTEST: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    if HEAD_FASTEST:
        cur_head = tl.program_id(0)
        cur_batch = tl.program_id(1).to(tl.int64)
    else:
        cur_batch = tl.program_id(0).to(tl.int64)
        cur_head = tl.program_id(1)

    cur_batch_seq_len = tl.load(kv_indptr + cur_batch + 1) - tl.load(
        kv_indptr + cur_batch
    )
    kv_splits = tl.load(num_kv_splits + cur_batch)

    offs_d = tl.arange(0, BLOCK_DV)
    mask_d = offs_d < Lv

    e_sum = 0.0
    e_max = -float("inf")
    acc = tl.zeros([BLOCK_DV], dtype=tl.float32)

    offs_v = cur_batch * stride_mid_ob + cur_head * stride_mid_oh + offs_d
    offs_logic = (cur_batch * stride_mid_ob + cur_head * stride_mid_oh) // Lv
    kv_len_per_split = (
        tl.cdiv(tl.cdiv(cur_batch_seq_len, kv_splits), MIN_BLOCK_KV) * MIN_BLOCK_KV
    )
    # Splits [0, n_live) are exactly the non-empty ones stage 1 wrote (same order
    # as a full 0..MAX_KV_SPLITS walk that skips empty splits).
    n_live = tl.minimum(
        tl.cdiv(cur_batch_seq_len, tl.maximum(kv_len_per_split, 1)), MAX_KV_SPLITS
    )

    if USE_PDL:
        tl.extra.cuda.gdc_wait()

    for split_kv_id in tl.range(0, n_live, num_stages=2):
        tv = tl.load(
            Mid_O + offs_v + split_kv_id * stride_mid_os, mask=mask_d, other=0.0
        )
        tlogic = tl.load(Mid_O_1 + offs_logic + split_kv_id * stride_mid_os // Lv)
        n_e_max = tl.maximum(tlogic, e_max)

        old_scale = tl.exp(e_max - n_e_max)
        acc *= old_scale
        exp_logic = tl.exp(tlogic - n_e_max)
        acc += exp_logic * tv

        e_sum = e_sum * old_scale + exp_logic
        e_max = n_e_max

    if HAS_SINK:
        cur_sink = tl.load(sink_ptr + cur_head)
        e_sum += tl.exp(cur_sink - e_max)

    tl.store(
        O + cur_batch * stride_obs + cur_head * stride_oh + offs_d,
        acc / e_sum * v_scale,
        mask=mask_d,
    )


def _launch_stage2(grid, args, kwargs):
    if _PDL_OK[0]:
        try:
            _fwd_kernel_stage2[grid](*args, USE_PDL=True, launch_pdl=True, **kwargs)
            return
        except Exception:
            _PDL_OK[0] = False
    _fwd_kernel_stage2[grid](*args, USE_PDL=False, **kwargs)


def _launch_stage1(kernel, grid, args, kwargs, use_pdl):
    if use_pdl:
        try:
            kernel[grid](*args, USE_PDL=True, **kwargs)
            return True
        except Exception:
            _PDL_OK[0] = False
    kernel[grid](*args, USE_PDL=False, **kwargs)
    return False


def decode_attention_fwd(
    q,
    k_buffer,
    v_buffer,
    o,
    kv_indptr,
    kv_indices,
    attn_logits,
    attn_lse,
    num_kv_splits,
    max_kv_splits,
    sm_scale,
    k_scale,
    v_scale,
    logit_cap=0.0,
    sinks=None,
    xai_temperature_len=-1,
    has_mla=False,
    use_pdl=False,
    page_size: int = 1,
    score_mod=None,
    aux_tensors=None,
    enable_lean=None,
    lean_Mp=None,
    lean_Lp=None,
    lean_Op=None,
    lean_locks=None,
    uneven_batch=None,
):
    assert max_kv_splits == attn_logits.shape[2]
    assert q.shape[0] <= kv_indptr.shape[0] - 1
    assert q.shape[0] <= attn_logits.shape[0]
    if score_mod is not None:
        raise NotImplementedError("score_mod is not supported by this kernel")
    if k_buffer.ndim != 3 or v_buffer.ndim != 3:
        raise ValueError("expected 3-D [slots, heads, dim] KV buffers")

    batch, head_num = q.shape[0], q.shape[1]
    if batch == 0:
        return
    kv_head_num = v_buffer.shape[-2]
    kv_group_num = head_num // kv_head_num
    Lk = k_buffer.shape[-1]
    Lv = v_buffer.shape[-1]
    sm_scale_withk = float(sm_scale) * float(k_scale)
    xai_len = xai_temperature_len if xai_temperature_len is not None else -1
    elt = k_buffer.element_size()

    block_n_cfg = int(CONFIG["BLOCK_N"])
    stages_cfg = _NUM_STAGES
    prefetch = bool(CONFIG["PREFETCH"])
    # head-tile-fastest order puts the batch in grid z (and y for stage 2)
    head_fastest = bool(CONFIG["HEAD_FASTEST"]) and batch <= _MAX_GRID_YZ
    evict = bool(CONFIG["EVICT"])
    idx_evict = "evict_last" if evict else ""

    BLOCK_DV = triton.next_power_of_2(Lv)
    # PDL only on a real GPU (the Triton interpreter has no grid dependency control)
    use_pdl_launch = _PDL_OK[0] and q.is_cuda

    if kv_group_num == 1:
        BLOCK_DMODEL = triton.next_power_of_2(Lk)
        BLOCK_N, num_stages = _fit_pipeline(
            block_n_cfg, stages_cfg, (BLOCK_DMODEL + BLOCK_DV) * elt
        )
        if head_fastest:
            grid = (head_num, max_kv_splits, batch)
        else:
            grid = (batch, head_num, max_kv_splits)
        s1_args = (
            q,
            k_buffer,
            v_buffer,
            sm_scale_withk,
            kv_indptr,
            kv_indices,
            attn_logits,
            attn_lse,
            num_kv_splits,
            q.stride(0),
            q.stride(1),
            k_buffer.stride(0),
            k_buffer.stride(1),
            v_buffer.stride(0),
            v_buffer.stride(1),
            attn_logits.stride(0),
            attn_logits.stride(1),
            attn_logits.stride(2),
        )
        s1_kwargs = dict(
            kv_group_num=kv_group_num,
            BLOCK_DMODEL=BLOCK_DMODEL,
            BLOCK_DV=BLOCK_DV,
            BLOCK_N=BLOCK_N,
            MIN_BLOCK_KV=_MIN_BLOCK_KV,
            logit_cap=logit_cap,
            Lk=Lk,
            Lv=Lv,
            xai_temperature_len=xai_len,
            HEAD_FASTEST=head_fastest,
            KV_EVICT="evict_first" if evict else "",
            IDX_EVICT=idx_evict,
            num_warps=4,
            num_stages=num_stages,
        )
        use_pdl_launch = _launch_stage1(
            _fwd_kernel_stage1, grid, s1_args, s1_kwargs, use_pdl_launch
        )
    else:
        if Lk == 576:
            BLOCK_DMODEL, BLOCK_DPE = 512, 64
        elif Lk == 288:
            BLOCK_DMODEL, BLOCK_DPE = 256, 32
        else:
            BLOCK_DMODEL, BLOCK_DPE = triton.next_power_of_2(Lk), 0
        row_bytes = (BLOCK_DMODEL + BLOCK_DPE) * elt
        if not has_mla:
            row_bytes += BLOCK_DV * elt
        BLOCK_N, num_stages = _fit_pipeline(block_n_cfg, stages_cfg, row_bytes)
        head_tiles = _grouped_head_tiles(head_num, kv_group_num)
        if head_fastest:
            grid = (head_tiles, max_kv_splits, batch)
        else:
            grid = (batch, head_tiles, max_kv_splits)
        # K/V rows are read once per head tile; when several head tiles share a
        # KV head (G > 16) keep the default policy so the sibling tile can hit L2.
        kv_once = kv_group_num <= _GROUPED_BLOCK_H
        s1_args = (
            q,
            k_buffer,
            v_buffer,
            sm_scale_withk,
            kv_indptr,
            kv_indices,
            attn_logits,
            attn_lse,
            num_kv_splits,
            q.stride(0),
            q.stride(1),
            k_buffer.stride(0),
            k_buffer.stride(1),
            v_buffer.stride(0),
            v_buffer.stride(1),
            attn_logits.stride(0),
            attn_logits.stride(1),
            attn_logits.stride(2),
        )
        s1_kwargs = dict(
            kv_group_num=kv_group_num,
            q_head_num=head_num,
            BLOCK_DMODEL=BLOCK_DMODEL,
            BLOCK_DPE=BLOCK_DPE,
            BLOCK_DV=BLOCK_DV,
            BLOCK_N=BLOCK_N,
            BLOCK_H=_GROUPED_BLOCK_H,
            MIN_BLOCK_KV=_MIN_BLOCK_KV,
            logit_cap=logit_cap,
            xai_temperature_len=xai_len,
            Lk=Lk,
            Lv=Lv,
            HAS_MLA=bool(has_mla),
            PREFETCH=prefetch,
            HEAD_FASTEST=head_fastest,
            KV_EVICT="evict_first" if (evict and kv_once) else "",
            IDX_EVICT=idx_evict,
            num_warps=4,
            num_stages=num_stages,
        )
        use_pdl_launch = _launch_stage1(
            _fwd_grouped_kernel_stage1, grid, s1_args, s1_kwargs, use_pdl_launch
        )

    args = (
        attn_logits,
        attn_lse,
        o,
        float(v_scale),
        kv_indptr,
        num_kv_splits,
        sinks,
        attn_logits.stride(0),
        attn_logits.stride(1),
        attn_logits.stride(2),
        o.stride(0),
        o.stride(1),
    )
    kwargs = dict(
        MAX_KV_SPLITS=max_kv_splits,
        MIN_BLOCK_KV=_MIN_BLOCK_KV,
        BLOCK_DV=BLOCK_DV,
        Lv=Lv,
        HAS_SINK=sinks is not None,
        HEAD_FASTEST=head_fastest,
        num_warps=4,
        num_stages=2,
    )
    grid2 = (head_num, batch) if head_fastest else (batch, head_num)
    if use_pdl_launch:
        _launch_stage2(grid2, args, kwargs)
    else:
        _fwd_kernel_stage2[grid2](*args, USE_PDL=False, **kwargs)



# ---- astra-sglang tune: frozen dispatch table (generated; nothing is tuned when this runs) ----
# Each row: the timed shape (a bucket) and the config the sweep chose there; a call uses the row whose dims
# are nearest to its own (sum of |log| differences). Every row's config passed the harness's checks.
import math as _astra_math

TUNED = [
    ({'B': 128, 'S': 1024, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 1966080, 'MS': 8}, {'BLOCK_N': 64, 'PREFETCH': 0, 'HEAD_FASTEST': 0, 'EVICT': 1}),
    ({'B': 32, 'S': 1024, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 2064384, 'MS': 8}, {'BLOCK_N': 64, 'PREFETCH': 1, 'HEAD_FASTEST': 0, 'EVICT': 1}),
    ({'B': 1, 'S': 1024, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 2096128, 'MS': 8}, {'BLOCK_N': 64, 'PREFETCH': 1, 'HEAD_FASTEST': 0, 'EVICT': 1}),
    ({'B': 1, 'S': 8192, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 2088960, 'MS': 8}, {'BLOCK_N': 64, 'PREFETCH': 1, 'HEAD_FASTEST': 0, 'EVICT': 1}),
    ({'B': 16, 'S': 8192, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 1966080, 'MS': 8}, {'BLOCK_N': 32, 'PREFETCH': 1, 'HEAD_FASTEST': 0, 'EVICT': 1}),
    ({'B': 32, 'S': 8192, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 1835008, 'MS': 8}, {'BLOCK_N': 64, 'PREFETCH': 0, 'HEAD_FASTEST': 0, 'EVICT': 0}),
    ({'B': 128, 'S': 1024, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 2, 'X': 1, 'KX': 1966080, 'MS': 8}, {'BLOCK_N': 64, 'PREFETCH': 1, 'HEAD_FASTEST': 1, 'EVICT': 0}),
    ({'B': 256, 'S': 1024, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 2, 'X': 1, 'KX': 1835008, 'MS': 8}, {'BLOCK_N': 64, 'PREFETCH': 1, 'HEAD_FASTEST': 1, 'EVICT': 0}),
    ({'B': 64, 'S': 2048, 'NK': 8, 'G': 4, 'D': 128, 'P': 16, 'R': 2, 'X': 1, 'KX': 1966080, 'MS': 8}, {'BLOCK_N': 64, 'PREFETCH': 1, 'HEAD_FASTEST': 0, 'EVICT': 0}),
    ({'B': 32, 'S': 8192, 'NK': 8, 'G': 4, 'D': 128, 'P': 16, 'R': 1, 'X': 1, 'KX': 1835008, 'MS': 8}, {'BLOCK_N': 64, 'PREFETCH': 0, 'HEAD_FASTEST': 0, 'EVICT': 1}),
    ({'B': 64, 'S': 4096, 'NK': 8, 'G': 8, 'D': 128, 'P': 1, 'R': 2, 'X': 1, 'KX': 1835008, 'MS': 8}, {'BLOCK_N': 64, 'PREFETCH': 1, 'HEAD_FASTEST': 0, 'EVICT': 0}),
    ({'B': 8, 'S': 32768, 'NK': 4, 'G': 8, 'D': 128, 'P': 1, 'R': 2, 'X': 1, 'KX': 1835008, 'MS': 8}, {'BLOCK_N': 64, 'PREFETCH': 1, 'HEAD_FASTEST': 0, 'EVICT': 0}),
    ({'B': 128, 'S': 2048, 'NK': 2, 'G': 8, 'D': 128, 'P': 1, 'R': 2, 'X': 1, 'KX': 1835008, 'MS': 8}, {'BLOCK_N': 64, 'PREFETCH': 0, 'HEAD_FASTEST': 1, 'EVICT': 0}),
    ({'B': 256, 'S': 2048, 'NK': 4, 'G': 4, 'D': 128, 'P': 16, 'R': 2, 'X': 1, 'KX': 1572864, 'MS': 8}, {'BLOCK_N': 64, 'PREFETCH': 1, 'HEAD_FASTEST': 1, 'EVICT': 0}),
]


def _astra_dims(args, kwargs):
    dims = {}
    dims['B'] = int((args[0] if len(args) > 0 else kwargs['q']).shape[0])
    dims['D'] = int((args[0] if len(args) > 0 else kwargs['q']).shape[2])
    dims['NK'] = int((args[1] if len(args) > 1 else kwargs['k_buffer']).shape[1])
    dims['MS'] = int((args[6] if len(args) > 6 else kwargs['attn_logits']).shape[2])
    return dims


def _astra_config(args, kwargs):
    try:
        dims = _astra_dims(args, kwargs)
    except (AttributeError, IndexError, KeyError, TypeError):
        return TUNED[0][1]
    best, best_d = TUNED[0][1], None
    for key, config in TUNED:
        d = sum(abs(_astra_math.log(max(dims[k], 1)) - _astra_math.log(max(v, 1))) for k, v in key.items()
                if k in dims)
        if best_d is None or d < best_d:
            best, best_d = config, d
    return best


_astra_untuned_decode_attention_fwd = decode_attention_fwd


def decode_attention_fwd(*args, **kwargs):
    CONFIG.update(_astra_config(args, kwargs))
    return _astra_untuned_decode_attention_fwd(*args, **kwargs)
