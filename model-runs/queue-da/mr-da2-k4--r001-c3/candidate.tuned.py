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

GQA stage 1 processes HPC adjacent KV heads per CTA: one kv_indices load per
token block feeds a [HPC, D, BLOCK_N] K gather (HPC*D contiguous elements per
slot row) and a batched dot, so each slot row is fetched as one contiguous burst
instead of NK separate per-head pieces read at different times.  The number of
KV splits is raised from the launch shape (private partial workspace when it
exceeds attn_logits) so small batches still fill the GPU; stage 2 merges the
non-empty splits of each (request, head).
"""

import triton
import triton.language as tl
import torch

# Tunables (read on every call).
# TUNE frozen by astra-sglang tune: 14 bucket(s) in TUNED below; swept HPC=[2, 4], CTAS_PER_SM=[8, 16]
CONFIG = {'HPC': 2, 'CTAS_PER_SM': 16}

_MIN_BLOCK_KV = 32
_GROUPED_BLOCK_H = 16
_MAX_SPLITS_CAP = 64
_MIN_SPLITS = 8
_SMEM_BUDGET = 160 * 1024

_SM_COUNT = {}


def _sm_count(device) -> int:
    if device.type != "cuda":
        return 132
    idx = device.index
    if idx is None:
        idx = torch.cuda.current_device()
    n = _SM_COUNT.get(idx)
    if n is None:
        n = torch.cuda.get_device_properties(idx).multi_processor_count
        _SM_COUNT[idx] = n
    return n


def _grouped_head_tiles(head_num: int, kv_group_num: int) -> int:
    return triton.cdiv(head_num, min(_GROUPED_BLOCK_H, kv_group_num))


@triton.jit
def tanh(x):
    # Tanh is just a scaled sigmoid
    return 2 * tl.sigmoid(2 * x) - 1


@triton.jit
def _split_range(kv_indptr, cur_batch, NUM_SPLITS: tl.constexpr, ALIGN: tl.constexpr):
    kv_start = tl.load(kv_indptr + cur_batch)
    seq_len = tl.load(kv_indptr + cur_batch + 1) - kv_start
    per = (seq_len + NUM_SPLITS - 1) // NUM_SPLITS
    kv_len_per_split = ((per + ALIGN - 1) // ALIGN) * ALIGN
    kv_len_per_split = tl.maximum(kv_len_per_split, ALIGN)
    return kv_start, seq_len, kv_len_per_split


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
    stride_qbs,
    stride_qh,
    stride_buf_kbs,
    stride_buf_kh,
    stride_buf_vbs,
    stride_buf_vh,
    stride_mid_ob,
    stride_mid_oh,
    stride_mid_os,
    stride_lse_b,
    stride_lse_h,
    stride_lse_s,
    kv_group_num: tl.constexpr,
    BLOCK_DMODEL: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    ALIGN: tl.constexpr,
    logit_cap: tl.constexpr,
    Lk: tl.constexpr,
    Lv: tl.constexpr,
    xai_temperature_len: tl.constexpr,
):
    # MHA: one query head per CTA (same math as SGLang's stage 1).
    cur_head = tl.program_id(0)
    split_kv_id = tl.program_id(1)
    cur_batch = tl.program_id(2).to(tl.int64)
    _kv_b, _len_b, _per_b = _split_range(kv_indptr, cur_batch, NUM_SPLITS, ALIGN)
    _s0 = _per_b * split_kv_id
    _s1 = tl.minimum(_s0 + _per_b, _len_b)
    # empty splits exit before any setup work
    if _s1 > _s0:

        cur_kv_head = cur_head // kv_group_num

        offs_d = tl.arange(0, BLOCK_DMODEL)
        offs_dv = tl.arange(0, BLOCK_DV)
        mask_d = offs_d < Lk
        mask_dv = offs_dv < Lv

        cur_batch_kv_start_idx = _kv_b
        cur_batch_seq_len = _len_b
        kv_len_per_split = _per_b

        if xai_temperature_len > 0:
            offs_qidx = cur_batch_seq_len - 1
            xai_temperature_scale = 1.0 / tl.log2(float(xai_temperature_len))
            _qtemp = tl.log2(offs_qidx.to(tl.float32)) * xai_temperature_scale
            xai_temperature_reg = tl.where(offs_qidx > xai_temperature_len, _qtemp, 1.0)

        off_q = cur_batch * stride_qbs + cur_head * stride_qh + offs_d

        split_kv_start = kv_len_per_split * split_kv_id
        split_kv_end = tl.minimum(split_kv_start + kv_len_per_split, cur_batch_seq_len)

        e_max = -float("inf")
        e_sum = 0.0
        acc = tl.zeros([BLOCK_DV], dtype=tl.float32)

        if split_kv_end > split_kv_start:
            q = tl.load(Q + off_q, mask=mask_d, other=0.0)
            for start_n in range(split_kv_start, split_kv_end, BLOCK_N):
                offs_n = start_n + tl.arange(0, BLOCK_N)
                kv_loc = tl.load(
                    kv_indices + cur_batch_kv_start_idx + offs_n,
                    mask=offs_n < split_kv_end,
                    other=0,
                )
                offs_buf_k = (
                    kv_loc[:, None] * stride_buf_kbs
                    + cur_kv_head * stride_buf_kh
                    + offs_d[None, :]
                )
                k = tl.load(
                    K_Buffer + offs_buf_k,
                    mask=(offs_n[:, None] < split_kv_end) & (mask_d[None, :]),
                    other=0.0,
                )
                qk = tl.sum((q[None, :] * k).to(tl.float32), 1)
                qk *= sm_scale

                if logit_cap > 0:
                    qk = logit_cap * tanh(qk / logit_cap)

                if xai_temperature_len > 0:
                    qk *= xai_temperature_reg

                qk = tl.where(offs_n < split_kv_end, qk, float("-inf"))

                offs_buf_v = (
                    kv_loc[:, None] * stride_buf_vbs
                    + cur_kv_head * stride_buf_vh
                    + offs_dv[None, :]
                )
                v = tl.load(
                    V_Buffer + offs_buf_v,
                    mask=(offs_n[:, None] < split_kv_end) & (mask_dv[None, :]),
                    other=0.0,
                )

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
            tl.store(Att_Out + offs_mid_o, acc / e_sum, mask=mask_dv)
            offs_lse = (
                cur_batch * stride_lse_b + cur_head * stride_lse_h + split_kv_id * stride_lse_s
            )
            tl.store(Att_Lse + offs_lse, e_max + tl.log(e_sum))


@triton.jit
def _fwd_multihead_kernel_stage1(
    Q,
    K_Buffer,
    V_Buffer,
    sm_scale,
    kv_indptr,
    kv_indices,
    Att_Out,
    Att_Lse,
    stride_qbs,
    stride_qh,
    stride_buf_kbs,
    stride_buf_kh,
    stride_buf_vbs,
    stride_buf_vh,
    stride_mid_ob,
    stride_mid_oh,
    stride_mid_os,
    stride_lse_b,
    stride_lse_h,
    stride_lse_s,
    kv_group_num: tl.constexpr,
    kv_head_num: tl.constexpr,
    HPC: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_DMODEL: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    ALIGN: tl.constexpr,
    logit_cap: tl.constexpr,
    xai_temperature_len: tl.constexpr,
    Lk: tl.constexpr,
    Lv: tl.constexpr,
):
    # GQA with kv_group_num <= BLOCK_H: HPC KV heads x BLOCK_H query rows per CTA.
    head_blk = tl.program_id(0)
    split_kv_id = tl.program_id(1)
    cur_batch = tl.program_id(2).to(tl.int64)
    _kv_b, _len_b, _per_b = _split_range(kv_indptr, cur_batch, NUM_SPLITS, ALIGN)
    _s0 = _per_b * split_kv_id
    _s1 = tl.minimum(_s0 + _per_b, _len_b)
    # empty splits exit before any setup work
    if _s1 > _s0:

        offs_hh = tl.arange(0, HPC)
        offs_r = tl.arange(0, BLOCK_H)
        kv_head = head_blk * HPC + offs_hh  # [HPC]
        mask_kvh = kv_head < kv_head_num
        q_head = kv_head[:, None] * kv_group_num + offs_r[None, :]  # [HPC, BLOCK_H]
        mask_qh = mask_kvh[:, None] & (offs_r[None, :] < kv_group_num)

        offs_d = tl.arange(0, BLOCK_DMODEL)
        offs_dv = tl.arange(0, BLOCK_DV)
        mask_d = offs_d < Lk
        mask_dv = offs_dv < Lv

        cur_batch_kv_start_idx = _kv_b
        cur_batch_seq_len = _len_b
        kv_len_per_split = _per_b

        if xai_temperature_len > 0:
            offs_qidx = cur_batch_seq_len - 1
            xai_temperature_scale = 1.0 / tl.log2(float(xai_temperature_len))
            _qtemp = tl.log2(offs_qidx.to(tl.float32)) * xai_temperature_scale
            xai_temperature_reg = tl.where(offs_qidx > xai_temperature_len, _qtemp, 1.0)

        split_kv_start = kv_len_per_split * split_kv_id
        split_kv_end = tl.minimum(split_kv_start + kv_len_per_split, cur_batch_seq_len)

        e_max = tl.zeros([HPC, BLOCK_H], dtype=tl.float32) - float("inf")
        e_sum = tl.zeros([HPC, BLOCK_H], dtype=tl.float32)
        acc = tl.zeros([HPC, BLOCK_H, BLOCK_DV], dtype=tl.float32)

        # [HPC, D, 1] / [HPC, 1, DV] head offsets inside a slot row
        base_k = kv_head[:, None, None] * stride_buf_kh + offs_d[None, :, None]
        mask_k_hd = mask_kvh[:, None, None] & mask_d[None, :, None]
        base_v = kv_head[:, None, None] * stride_buf_vh + offs_dv[None, None, :]
        mask_v_hd = mask_kvh[:, None, None] & mask_dv[None, None, :]

        if split_kv_end > split_kv_start:
            offs_q = (
                cur_batch * stride_qbs
                + q_head[:, :, None] * stride_qh
                + offs_d[None, None, :]
            )
            q = tl.load(
                Q + offs_q,
                mask=mask_qh[:, :, None] & mask_d[None, None, :],
                other=0.0,
            )
            q_k = q.to(K_Buffer.dtype.element_ty)
            for start_n in tl.range(split_kv_start, split_kv_end, BLOCK_N):
                offs_n = start_n + tl.arange(0, BLOCK_N)
                mask_n = offs_n < split_kv_end
                kv_loc = tl.load(
                    kv_indices + cur_batch_kv_start_idx + offs_n,
                    mask=mask_n,
                    other=0,
                )
                k = tl.load(
                    K_Buffer + kv_loc[None, None, :] * stride_buf_kbs + base_k,
                    mask=mask_k_hd & mask_n[None, None, :],
                    other=0.0,
                )
                v = tl.load(
                    V_Buffer + kv_loc[None, :, None] * stride_buf_vbs + base_v,
                    mask=mask_v_hd & mask_n[None, :, None],
                    other=0.0,
                )
                qk = tl.dot(q_k, k)  # [HPC, BLOCK_H, BLOCK_N]
                qk *= sm_scale

                if logit_cap > 0:
                    qk = logit_cap * tanh(qk / logit_cap)

                if xai_temperature_len > 0:
                    qk *= xai_temperature_reg

                qk = tl.where(
                    mask_qh[:, :, None] & mask_n[None, None, :], qk, float("-inf")
                )

                n_e_max = tl.maximum(tl.max(qk, 2), e_max)
                re_scale = tl.exp(e_max - n_e_max)
                p = tl.exp(qk - n_e_max[:, :, None])
                acc *= re_scale[:, :, None]
                acc += tl.dot(p.to(v.dtype), v)

                e_sum = e_sum * re_scale + tl.sum(p, 2)
                e_max = n_e_max

            offs_mid_o = (
                cur_batch * stride_mid_ob
                + q_head[:, :, None] * stride_mid_oh
                + split_kv_id * stride_mid_os
                + offs_dv[None, None, :]
            )
            tl.store(
                Att_Out + offs_mid_o,
                acc / e_sum[:, :, None],
                mask=mask_qh[:, :, None] & mask_dv[None, None, :],
            )
            offs_lse = (
                cur_batch * stride_lse_b + q_head * stride_lse_h + split_kv_id * stride_lse_s
            )
            tl.store(Att_Lse + offs_lse, e_max + tl.log(e_sum), mask=mask_qh)


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
    stride_qbs,
    stride_qh,
    stride_buf_kbs,
    stride_buf_kh,
    stride_buf_vbs,
    stride_buf_vh,
    stride_mid_ob,
    stride_mid_oh,
    stride_mid_os,
    stride_lse_b,
    stride_lse_h,
    stride_lse_s,
    kv_group_num: tl.constexpr,
    q_head_num: tl.constexpr,
    BLOCK_DMODEL: tl.constexpr,
    BLOCK_DPE: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_H: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    ALIGN: tl.constexpr,
    logit_cap: tl.constexpr,
    xai_temperature_len: tl.constexpr,
    Lk: tl.constexpr,
    Lv: tl.constexpr,
    HAS_MLA: tl.constexpr,
):
    # Generic grouped path (G > 16 or MLA rope-split head dims).
    cur_head_id = tl.program_id(0)
    split_kv_id = tl.program_id(1)
    cur_batch = tl.program_id(2).to(tl.int64)
    if BLOCK_H < kv_group_num:
        VALID_BLOCK_H: tl.constexpr = BLOCK_H
    else:
        VALID_BLOCK_H: tl.constexpr = kv_group_num
    _kv_b, _len_b, _per_b = _split_range(kv_indptr, cur_batch, NUM_SPLITS, ALIGN)
    _s0 = _per_b * split_kv_id
    _s1 = tl.minimum(_s0 + _per_b, _len_b)
    # empty splits exit before any setup work
    if _s1 > _s0:

        cur_kv_head = cur_head_id // tl.cdiv(kv_group_num, BLOCK_H)

        cur_head = cur_head_id * VALID_BLOCK_H + tl.arange(0, BLOCK_H)
        mask_h = cur_head < (cur_head_id + 1) * VALID_BLOCK_H
        mask_h = mask_h & (cur_head < q_head_num)

        offs_d = tl.arange(0, BLOCK_DMODEL)
        offs_dv = tl.arange(0, BLOCK_DV)
        mask_d = offs_d < Lk
        mask_dv = offs_dv < Lv

        cur_batch_kv_start_idx = _kv_b
        cur_batch_seq_len = _len_b
        kv_len_per_split = _per_b

        if xai_temperature_len > 0:
            offs_qidx = cur_batch_seq_len - 1
            xai_temperature_scale = 1.0 / tl.log2(float(xai_temperature_len))
            _qtemp = tl.log2(offs_qidx.to(tl.float32)) * xai_temperature_scale
            xai_temperature_reg = tl.where(offs_qidx > xai_temperature_len, _qtemp, 1.0)

        offs_q = cur_batch * stride_qbs + cur_head[:, None] * stride_qh + offs_d[None, :]

        if BLOCK_DPE > 0:
            offs_dpe = BLOCK_DMODEL + tl.arange(0, BLOCK_DPE)
            mask_dpe = offs_dpe < Lk
            off_qpe = (
                cur_batch * stride_qbs + cur_head[:, None] * stride_qh + offs_dpe[None, :]
            )

        split_kv_start = kv_len_per_split * split_kv_id
        split_kv_end = tl.minimum(split_kv_start + kv_len_per_split, cur_batch_seq_len)

        e_max = tl.zeros([BLOCK_H], dtype=tl.float32) - float("inf")
        e_sum = tl.zeros([BLOCK_H], dtype=tl.float32)
        acc = tl.zeros([BLOCK_H, BLOCK_DV], dtype=tl.float32)

        base_offs_k = cur_kv_head * stride_buf_kh + offs_d[:, None]
        if BLOCK_DPE > 0:
            base_offs_kpe = cur_kv_head * stride_buf_kh + offs_dpe[:, None]
        if not HAS_MLA:
            base_offs_v = cur_kv_head * stride_buf_vh + offs_dv[None, :]

        if split_kv_end > split_kv_start:
            q = tl.load(Q + offs_q, mask=(mask_h[:, None]) & (mask_d[None, :]), other=0.0)
            q_k = q.to(K_Buffer.dtype.element_ty)
            if BLOCK_DPE > 0:
                qpe = tl.load(
                    Q + off_qpe, mask=(mask_h[:, None]) & (mask_dpe[None, :]), other=0.0
                )
            for start_n in tl.range(split_kv_start, split_kv_end, BLOCK_N):
                offs_n = start_n + tl.arange(0, BLOCK_N)
                kv_loc = tl.load(
                    kv_indices + cur_batch_kv_start_idx + offs_n,
                    mask=offs_n < split_kv_end,
                    other=0,
                )
                offs_buf_k = kv_loc[None, :] * stride_buf_kbs + base_offs_k
                k = tl.load(
                    K_Buffer + offs_buf_k,
                    mask=(offs_n[None, :] < split_kv_end) & (mask_d[:, None]),
                    other=0.0,
                )
                qk = tl.dot(q_k, k)
                if BLOCK_DPE > 0:
                    offs_buf_kpe = kv_loc[None, :] * stride_buf_kbs + base_offs_kpe
                    kpe = tl.load(
                        K_Buffer + offs_buf_kpe,
                        mask=(offs_n[None, :] < split_kv_end) & (mask_dpe[:, None]),
                        other=0.0,
                    )
                    qk += tl.dot(qpe, kpe.to(qpe.dtype))
                qk *= sm_scale

                if logit_cap > 0:
                    qk = logit_cap * tanh(qk / logit_cap)

                if xai_temperature_len > 0:
                    qk *= xai_temperature_reg[:, None]

                qk = tl.where(
                    mask_h[:, None] & (offs_n[None, :] < split_kv_end), qk, float("-inf")
                )
                if HAS_MLA:
                    v = tl.trans(k)
                else:
                    offs_buf_v = kv_loc[:, None] * stride_buf_vbs + base_offs_v
                    v = tl.load(
                        V_Buffer + offs_buf_v,
                        mask=(offs_n[:, None] < split_kv_end) & (mask_dv[None, :]),
                        other=0.0,
                    )

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
            offs_lse = (
                cur_batch * stride_lse_b + cur_head * stride_lse_h + split_kv_id * stride_lse_s
            )
            tl.store(Att_Lse + offs_lse, e_max + tl.log(e_sum), mask=mask_h)


@triton.jit
def _fwd_kernel_stage2(
    Mid_O,
    Mid_Lse,
    O,
    v_scale,
    kv_indptr,
    sink_ptr,
    stride_mid_ob,
    stride_mid_oh,
    stride_mid_os,
    stride_lse_b,
    stride_lse_h,
    stride_lse_s,
    stride_obs,
    stride_oh,
    NUM_SPLITS: tl.constexpr,
    ALIGN: tl.constexpr,
    SPLIT_TILE: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    Lv: tl.constexpr,
    HAS_SINK: tl.constexpr,
):
    cur_batch = tl.program_id(0).to(tl.int64)
    cur_head = tl.program_id(1)

    _kv_start, cur_batch_seq_len, kv_len_per_split = _split_range(
        kv_indptr, cur_batch, NUM_SPLITS, ALIGN
    )
    # splits [0, n_live) are exactly the non-empty ones stage 1 wrote
    n_live = (cur_batch_seq_len + kv_len_per_split - 1) // kv_len_per_split

    offs_d = tl.arange(0, BLOCK_DV)
    mask_d = offs_d < Lv

    lse_base = Mid_Lse + cur_batch * stride_lse_b + cur_head * stride_lse_h
    o_base = Mid_O + cur_batch * stride_mid_ob + cur_head * stride_mid_oh

    offs_s = tl.arange(0, NUM_SPLITS)
    lse_all = tl.load(
        lse_base + offs_s * stride_lse_s, mask=offs_s < n_live, other=-float("inf")
    )
    e_max = tl.max(lse_all, 0)

    acc = tl.zeros([BLOCK_DV], dtype=tl.float32)
    w_acc = tl.zeros([SPLIT_TILE], dtype=tl.float32)
    for s0 in range(0, n_live, SPLIT_TILE):
        offs_t = s0 + tl.arange(0, SPLIT_TILE)
        mask_t = offs_t < n_live
        lse_t = tl.load(
            lse_base + offs_t * stride_lse_s, mask=mask_t, other=-float("inf")
        )
        w = tl.where(mask_t, tl.exp(lse_t - e_max), 0.0)
        tv = tl.load(
            o_base + offs_t[:, None] * stride_mid_os + offs_d[None, :],
            mask=mask_t[:, None] & mask_d[None, :],
            other=0.0,
        )
        acc += tl.sum(w[:, None] * tv, 0)
        w_acc += w
    e_sum = tl.sum(w_acc, 0)

    if HAS_SINK:
        cur_sink = tl.load(sink_ptr + cur_head)
        e_sum += tl.exp(cur_sink - e_max)

    tl.store(
        O + cur_batch * stride_obs + cur_head * stride_oh + offs_d,
        acc / e_sum * v_scale,
        mask=mask_d,
    )


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
    device = q.device
    kv_head_num = v_buffer.shape[-2]
    kv_group_num = head_num // kv_head_num
    Lk = k_buffer.shape[-1]
    Lv = v_buffer.shape[-1]
    sm_scale_withk = float(sm_scale) * float(k_scale)
    xai_len = xai_temperature_len if xai_temperature_len is not None else -1
    elt = k_buffer.element_size()
    BLOCK_DV = triton.next_power_of_2(Lv)
    ctas_per_sm = int(CONFIG["CTAS_PER_SM"])

    mode = "mha"
    if kv_group_num > 1:
        if (
            kv_group_num <= _GROUPED_BLOCK_H
            and not has_mla
            and Lk not in (576, 288)
        ):
            mode = "multi"
        else:
            mode = "grouped"

    BLOCK_N = 32
    if mode == "mha":
        work_units = head_num
        BLOCK_N = 64
    elif mode == "multi":
        BLOCK_DMODEL = triton.next_power_of_2(Lk)
        hpc = max(1, min(int(CONFIG["HPC"]), triton.next_power_of_2(kv_head_num)))
        while hpc > 1 and hpc * BLOCK_N * (BLOCK_DMODEL + BLOCK_DV) * elt * 2 > _SMEM_BUDGET:
            hpc //= 2
        work_units = triton.cdiv(kv_head_num, hpc)
    else:
        work_units = _grouped_head_tiles(head_num, kv_group_num)
    ALIGN = max(_MIN_BLOCK_KV, BLOCK_N)

    target = max(1, ctas_per_sm * _sm_count(device))
    num_splits = triton.next_power_of_2(max(1, triton.cdiv(target, batch * work_units)))
    num_splits = max(_MIN_SPLITS, min(_MAX_SPLITS_CAP, num_splits))

    if (
        num_splits <= attn_logits.shape[2]
        and attn_logits.dtype == torch.float32
        and attn_lse.dtype == torch.float32
        and attn_logits.shape[-1] >= Lv
    ):
        mid_o, mid_lse = attn_logits, attn_lse
    else:
        mid_o = torch.empty(
            (batch, head_num, num_splits, Lv), dtype=torch.float32, device=device
        )
        mid_lse = torch.empty(
            (batch, head_num, num_splits), dtype=torch.float32, device=device
        )

    common = (
        q,
        k_buffer,
        v_buffer,
        sm_scale_withk,
        kv_indptr,
        kv_indices,
        mid_o,
        mid_lse,
        q.stride(0),
        q.stride(1),
        k_buffer.stride(0),
        k_buffer.stride(1),
        v_buffer.stride(0),
        v_buffer.stride(1),
        mid_o.stride(0),
        mid_o.stride(1),
        mid_o.stride(2),
        mid_lse.stride(0),
        mid_lse.stride(1),
        mid_lse.stride(2),
    )
    grid = (work_units, num_splits, batch)

    if mode == "mha":
        _fwd_kernel_stage1[grid](
            *common,
            kv_group_num=kv_group_num,
            BLOCK_DMODEL=triton.next_power_of_2(Lk),
            BLOCK_DV=BLOCK_DV,
            BLOCK_N=BLOCK_N,
            NUM_SPLITS=num_splits,
            ALIGN=ALIGN,
            logit_cap=logit_cap,
            Lk=Lk,
            Lv=Lv,
            xai_temperature_len=xai_len,
            num_warps=4,
            num_stages=2,
        )
    elif mode == "multi":
        _fwd_multihead_kernel_stage1[grid](
            *common,
            kv_group_num=kv_group_num,
            kv_head_num=kv_head_num,
            HPC=hpc,
            BLOCK_H=_GROUPED_BLOCK_H,
            BLOCK_DMODEL=BLOCK_DMODEL,
            BLOCK_DV=BLOCK_DV,
            BLOCK_N=BLOCK_N,
            NUM_SPLITS=num_splits,
            ALIGN=ALIGN,
            logit_cap=logit_cap,
            xai_temperature_len=xai_len,
            Lk=Lk,
            Lv=Lv,
            num_warps=8 if hpc >= 4 else 4,
            num_stages=2,
        )
    else:
        if Lk == 576:
            BLOCK_DMODEL, BLOCK_DPE = 512, 64
        elif Lk == 288:
            BLOCK_DMODEL, BLOCK_DPE = 256, 32
        else:
            BLOCK_DMODEL, BLOCK_DPE = triton.next_power_of_2(Lk), 0
        _fwd_grouped_kernel_stage1[grid](
            *common,
            kv_group_num=kv_group_num,
            q_head_num=head_num,
            BLOCK_DMODEL=BLOCK_DMODEL,
            BLOCK_DPE=BLOCK_DPE,
            BLOCK_DV=BLOCK_DV,
            BLOCK_N=BLOCK_N,
            BLOCK_H=_GROUPED_BLOCK_H,
            NUM_SPLITS=num_splits,
            ALIGN=ALIGN,
            logit_cap=logit_cap,
            xai_temperature_len=xai_len,
            Lk=Lk,
            Lv=Lv,
            HAS_MLA=bool(has_mla),
            num_warps=4,
            num_stages=2,
        )

    _fwd_kernel_stage2[(batch, head_num)](
        mid_o,
        mid_lse,
        o,
        float(v_scale),
        kv_indptr,
        sinks,
        mid_o.stride(0),
        mid_o.stride(1),
        mid_o.stride(2),
        mid_lse.stride(0),
        mid_lse.stride(1),
        mid_lse.stride(2),
        o.stride(0),
        o.stride(1),
        NUM_SPLITS=num_splits,
        ALIGN=ALIGN,
        SPLIT_TILE=min(num_splits, 16),
        BLOCK_DV=BLOCK_DV,
        Lv=Lv,
        HAS_SINK=sinks is not None,
        num_warps=4,
        num_stages=2,
    )


# ---- astra-sglang tune: frozen dispatch table (generated; nothing is tuned when this runs) ----
# Each row: the timed shape (a bucket) and the config the sweep chose there; a call uses the row whose dims
# are nearest to its own (sum of |log| differences). Every row's config passed the harness's checks.
import math as _astra_math

TUNED = [
    ({'B': 128, 'S': 1024, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 1966080, 'MS': 8}, {'HPC': 2, 'CTAS_PER_SM': 16}),
    ({'B': 32, 'S': 1024, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 2064384, 'MS': 8}, {'HPC': 2, 'CTAS_PER_SM': 8}),
    ({'B': 1, 'S': 1024, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 2096128, 'MS': 8}, {'HPC': 2, 'CTAS_PER_SM': 16}),
    ({'B': 1, 'S': 8192, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 2088960, 'MS': 8}, {'HPC': 2, 'CTAS_PER_SM': 16}),
    ({'B': 16, 'S': 8192, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 1966080, 'MS': 8}, {'HPC': 2, 'CTAS_PER_SM': 8}),
    ({'B': 32, 'S': 8192, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 1835008, 'MS': 8}, {'HPC': 2, 'CTAS_PER_SM': 8}),
    ({'B': 128, 'S': 1024, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 2, 'X': 1, 'KX': 1966080, 'MS': 8}, {'HPC': 2, 'CTAS_PER_SM': 16}),
    ({'B': 256, 'S': 1024, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 2, 'X': 1, 'KX': 1835008, 'MS': 8}, {'HPC': 2, 'CTAS_PER_SM': 8}),
    ({'B': 64, 'S': 2048, 'NK': 8, 'G': 4, 'D': 128, 'P': 16, 'R': 2, 'X': 1, 'KX': 1966080, 'MS': 8}, {'HPC': 2, 'CTAS_PER_SM': 8}),
    ({'B': 32, 'S': 8192, 'NK': 8, 'G': 4, 'D': 128, 'P': 16, 'R': 1, 'X': 1, 'KX': 1835008, 'MS': 8}, {'HPC': 2, 'CTAS_PER_SM': 8}),
    ({'B': 64, 'S': 4096, 'NK': 8, 'G': 8, 'D': 128, 'P': 1, 'R': 2, 'X': 1, 'KX': 1835008, 'MS': 8}, {'HPC': 2, 'CTAS_PER_SM': 16}),
    ({'B': 8, 'S': 32768, 'NK': 4, 'G': 8, 'D': 128, 'P': 1, 'R': 2, 'X': 1, 'KX': 1835008, 'MS': 8}, {'HPC': 2, 'CTAS_PER_SM': 16}),
    ({'B': 128, 'S': 2048, 'NK': 2, 'G': 8, 'D': 128, 'P': 1, 'R': 2, 'X': 1, 'KX': 1835008, 'MS': 8}, {'HPC': 4, 'CTAS_PER_SM': 8}),
    ({'B': 256, 'S': 2048, 'NK': 4, 'G': 4, 'D': 128, 'P': 16, 'R': 2, 'X': 1, 'KX': 1572864, 'MS': 8}, {'HPC': 2, 'CTAS_PER_SM': 8}),
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
