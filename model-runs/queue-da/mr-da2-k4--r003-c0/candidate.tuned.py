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

Two-stage split-KV scheme with a length-aware split plan computed on the device:
the chunk size comes from the batch's total KV length (kv_indptr[B] - kv_indptr[0])
and a target CTA count, so few-request / long-context batches get many splits and
the long requests of a mixed batch get proportionally more splits than short ones.
Stage 1 uses a deep multi-stage KV gather pipeline with kv_indices prefetch (one or
two blocks ahead) and a base-2 online softmax (scores pre-scaled by log2(e), lse
written back in natural units); requests
covered by a single split are finished by stage 1 (o written directly), all others
are merged by stage 2 (vectorised over splits, programmatic dependent launch).
"""

import triton
import triton.language as tl
import torch

# Tunables (read on every call).
# BLOCK_N x STAGES sets the stage-1 shared-memory footprint: at D=128 bf16 the
# default 32 x 4 is 64 KB per CTA (3 CTAs/SM) instead of 64 x 3 = 96 KB (2 CTAs/SM).
# TUNE frozen by astra-sglang tune: 14 bucket(s) in TUNED below; swept BLOCK_N=[32, 64], STAGES=[2, 3, 4], MIN_CHUNK=[64, 128]
CONFIG = {'BLOCK_N': 64, 'STAGES': 2, 'MIN_CHUNK': 64}
_CTAS_PER_SM = 8
_LOG2E = 1.4426950408889634

_MIN_BLOCK_KV = 32
_GROUPED_BLOCK_H = 16
_SMEM_BUDGET = 160 * 1024
_MAX_SPLITS_CAP = 128
_MIN_SPLITS = 4
_GRID_CAP = 16384

_PDL_OK = [True]
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


def _fit_pipeline(block_n: int, num_stages: int, row_bytes: int):
    """Shrink BLOCK_N / stages until the K+V stage buffers fit in shared memory."""
    while block_n > 16 and block_n * row_bytes * num_stages > _SMEM_BUDGET:
        block_n //= 2
    while num_stages > 1 and block_n * row_bytes * num_stages > _SMEM_BUDGET:
        num_stages -= 1
    return block_n, num_stages


def _plan_splits(batch: int, work_units: int, n_sm: int, ctas_per_sm: int, min_splits: int):
    target = max(1, int(ctas_per_sm) * n_sm)
    units = max(1, batch * work_units)
    # 4x headroom so requests up to ~4x the mean length still get enough splits
    want = triton.cdiv(4 * target, units)
    max_splits = triton.next_power_of_2(max(1, want))
    max_splits = max(min_splits, min(_MAX_SPLITS_CAP, max_splits))
    while max_splits > min_splits and units * max_splits > _GRID_CAP:
        max_splits //= 2
    return target, max_splits


@triton.jit
def tanh(x):
    # Tanh is just a scaled sigmoid
    return 2 * tl.sigmoid(2 * x) - 1


@triton.jit
def _split_plan(
    kv_indptr,
    cur_batch,
    batch,
    work_units,
    target_ctas,
    MIN_CHUNK: tl.constexpr,
    ALIGN: tl.constexpr,
    MAX_SPLITS: tl.constexpr,
):
    """Shared by stage 1 and stage 2: (kv start, seq len, tokens per split, live splits)."""
    kv_start = tl.load(kv_indptr + cur_batch)
    seq_len = tl.load(kv_indptr + cur_batch + 1) - kv_start
    total = (tl.load(kv_indptr + batch) - tl.load(kv_indptr)).to(tl.int64)
    work = total * work_units
    chunk = (work + target_ctas - 1) // target_ctas
    chunk = ((chunk + ALIGN - 1) // ALIGN) * ALIGN
    chunk = tl.maximum(chunk, MIN_CHUNK).to(tl.int32)
    n_splits = (seq_len + chunk - 1) // chunk
    n_splits = tl.minimum(tl.maximum(n_splits, 1), MAX_SPLITS)
    per = (seq_len + n_splits - 1) // n_splits
    per = ((per + ALIGN - 1) // ALIGN) * ALIGN
    per = tl.maximum(per, ALIGN)
    n_live = (seq_len + per - 1) // per
    return kv_start, seq_len, per, n_live


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
    O,
    sink_ptr,
    v_scale,
    batch,
    work_units,
    target_ctas,
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
    stride_obs,
    stride_oh,
    kv_group_num: tl.constexpr,
    BLOCK_DMODEL: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MIN_CHUNK: tl.constexpr,
    ALIGN: tl.constexpr,
    MAX_SPLITS: tl.constexpr,
    logit_cap: tl.constexpr,
    Lk: tl.constexpr,
    Lv: tl.constexpr,
    xai_temperature_len: tl.constexpr,
    HAS_SINK: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    cur_batch = tl.program_id(0).to(tl.int64)
    cur_head = tl.program_id(1)
    split_kv_id = tl.program_id(2)

    cur_batch_kv_start_idx, cur_batch_seq_len, kv_len_per_split, n_live = _split_plan(
        kv_indptr, cur_batch, batch, work_units, target_ctas, MIN_CHUNK, ALIGN, MAX_SPLITS
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
            )
            row_k = kv_loc * stride_buf_kbs + cur_kv_head * stride_buf_kh
            row_v = kv_loc * stride_buf_vbs + cur_kv_head * stride_buf_vh
            k = tl.load(
                K_Buffer + row_k[:, None] + offs_d[None, :],
                mask=(offs_n[:, None] < split_kv_end) & (mask_d[None, :]),
                other=0.0,
            )
            v = tl.load(
                V_Buffer + row_v[:, None] + offs_dv[None, :],
                mask=(offs_n[:, None] < split_kv_end) & (mask_dv[None, :]),
                other=0.0,
            )
            qk = tl.sum((q[None, :] * k).to(tl.float32), 1)
            qk *= sm_scale

            if logit_cap > 0:
                # cap in natural units, then move to base-2 units
                qk = logit_cap * tanh(qk / logit_cap)
                qk *= 1.4426950408889634

            if xai_temperature_len > 0:
                qk *= xai_temperature_reg

            qk = tl.where(offs_n < split_kv_end, qk, float("-inf"))

            n_e_max = tl.maximum(tl.max(qk, 0), e_max)
            re_scale = tl.exp2(e_max - n_e_max)
            p = tl.exp2(qk - n_e_max)
            acc *= re_scale
            acc += tl.sum(p[:, None] * v, 0)

            e_sum = e_sum * re_scale + tl.sum(p, 0)
            e_max = n_e_max

        if n_live == 1:
            # The only split of this request: finish it here (same math as stage 2).
            den = e_sum
            if HAS_SINK:
                cur_sink = tl.load(sink_ptr + cur_head)
                den += tl.exp2(cur_sink * 1.4426950408889634 - e_max)
            tl.store(
                O + cur_batch * stride_obs + cur_head * stride_oh + offs_dv,
                (acc / den * v_scale).to(O.dtype.element_ty),
                mask=mask_dv,
            )
        else:
            offs_mid_o = (
                cur_batch * stride_mid_ob
                + cur_head * stride_mid_oh
                + split_kv_id * stride_mid_os
                + offs_dv
            )
            tl.store(Att_Out + offs_mid_o, acc / e_sum, mask=mask_dv)
            offs_lse = (
                cur_batch * stride_lse_b
                + cur_head * stride_lse_h
                + split_kv_id * stride_lse_s
            )
            tl.store(Att_Lse + offs_lse, (e_max + tl.log2(e_sum)) * 0.6931471805599453)

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
    O,
    sink_ptr,
    v_scale,
    batch,
    work_units,
    target_ctas,
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
    stride_obs,
    stride_oh,
    kv_group_num: tl.constexpr,
    q_head_num: tl.constexpr,
    BLOCK_DMODEL: tl.constexpr,
    BLOCK_DPE: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_H: tl.constexpr,
    MIN_CHUNK: tl.constexpr,
    ALIGN: tl.constexpr,
    MAX_SPLITS: tl.constexpr,
    logit_cap: tl.constexpr,
    xai_temperature_len: tl.constexpr,
    Lk: tl.constexpr,
    Lv: tl.constexpr,
    HAS_MLA: tl.constexpr,
    HAS_SINK: tl.constexpr,
    PREFETCH: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    cur_batch = tl.program_id(0).to(tl.int64)
    cur_head_id = tl.program_id(1)
    split_kv_id = tl.program_id(2)

    if BLOCK_H < kv_group_num:
        VALID_BLOCK_H: tl.constexpr = BLOCK_H
    else:
        VALID_BLOCK_H: tl.constexpr = kv_group_num

    cur_batch_kv_start_idx, cur_batch_seq_len, kv_len_per_split, n_live = _split_plan(
        kv_indptr, cur_batch, batch, work_units, target_ctas, MIN_CHUNK, ALIGN, MAX_SPLITS
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
        if PREFETCH >= 1:
            offs_n0 = split_kv_start + tl.arange(0, BLOCK_N)
            kv_loc_next = tl.load(
                idx_base + offs_n0, mask=offs_n0 < split_kv_end, other=0
            )
        if PREFETCH >= 2:
            offs_n1 = offs_n0 + BLOCK_N
            kv_loc_next2 = tl.load(
                idx_base + offs_n1, mask=offs_n1 < split_kv_end, other=0
            )
        for start_n in tl.range(split_kv_start, split_kv_end, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            if PREFETCH >= 2:
                # indices two blocks ahead: the index -> gather chain stays hidden
                kv_loc = kv_loc_next
                kv_loc_next = kv_loc_next2
                offs_nn = offs_n + 2 * BLOCK_N
                kv_loc_next2 = tl.load(
                    idx_base + offs_nn, mask=offs_nn < split_kv_end, other=0
                )
            elif PREFETCH == 1:
                kv_loc = kv_loc_next
                offs_nn = offs_n + BLOCK_N
                kv_loc_next = tl.load(
                    idx_base + offs_nn, mask=offs_nn < split_kv_end, other=0
                )
            else:
                kv_loc = tl.load(
                    idx_base + offs_n,
                    mask=offs_n < split_kv_end,
                    other=0,
                )
            mask_n = offs_n < split_kv_end
            offs_buf_k = kv_loc[None, :] * stride_buf_kbs + base_offs_k
            k = tl.load(
                K_Buffer + offs_buf_k,
                mask=(mask_n[None, :]) & (mask_d[:, None]),
                other=0.0,
            )
            if not HAS_MLA:
                offs_buf_v = kv_loc[:, None] * stride_buf_vbs + base_offs_v
                v = tl.load(
                    V_Buffer + offs_buf_v,
                    mask=(mask_n[:, None]) & (mask_dv[None, :]),
                    other=0.0,
                )
            qk = tl.dot(q_k, k)
            if BLOCK_DPE > 0:
                offs_buf_kpe = kv_loc[None, :] * stride_buf_kbs + base_offs_kpe
                kpe = tl.load(
                    K_Buffer + offs_buf_kpe,
                    mask=(mask_n[None, :]) & (mask_dpe[:, None]),
                    other=0.0,
                )
                qk += tl.dot(qpe, kpe.to(qpe.dtype))
            qk *= sm_scale

            if logit_cap > 0:
                # cap in natural units, then move to base-2 units
                qk = logit_cap * tanh(qk / logit_cap)
                qk *= 1.4426950408889634

            if xai_temperature_len > 0:
                qk *= xai_temperature_reg[:, None]

            qk = tl.where(mask_h[:, None] & (mask_n[None, :]), qk, float("-inf"))
            if HAS_MLA:
                v = tl.trans(k)

            n_e_max = tl.maximum(tl.max(qk, 1), e_max)
            re_scale = tl.exp2(e_max - n_e_max)
            p = tl.exp2(qk - n_e_max[:, None])
            acc *= re_scale[:, None]
            acc += tl.dot(p.to(v.dtype), v)

            e_sum = e_sum * re_scale + tl.sum(p, 1)
            e_max = n_e_max

        if n_live == 1:
            # The only split of this request: finish it here (same math as stage 2).
            den = e_sum
            if HAS_SINK:
                cur_sink = tl.load(sink_ptr + cur_head, mask=mask_h, other=0.0)
                den += tl.exp2(cur_sink * 1.4426950408889634 - e_max)
            tl.store(
                O
                + cur_batch * stride_obs
                + cur_head[:, None] * stride_oh
                + offs_dv[None, :],
                (acc / den[:, None] * v_scale).to(O.dtype.element_ty),
                mask=(mask_h[:, None]) & (mask_dv[None, :]),
            )
        else:
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
                cur_batch * stride_lse_b
                + cur_head * stride_lse_h
                + split_kv_id * stride_lse_s
            )
            tl.store(
                Att_Lse + offs_lse,
                (e_max + tl.log2(e_sum)) * 0.6931471805599453,
                mask=mask_h,
            )

    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def _fwd_kernel_stage2(
    Mid_O,
    Mid_Lse,
    O,
    v_scale,
    kv_indptr,
    sink_ptr,
    batch,
    work_units,
    target_ctas,
    stride_mid_ob,
    stride_mid_oh,
    stride_mid_os,
    stride_lse_b,
    stride_lse_h,
    stride_lse_s,
    stride_obs,
    stride_oh,
    MIN_CHUNK: tl.constexpr,
    ALIGN: tl.constexpr,
    MAX_SPLITS: tl.constexpr,
    SPLIT_TILE: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    Lv: tl.constexpr,
    HAS_SINK: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    cur_batch = tl.program_id(0).to(tl.int64)
    cur_head = tl.program_id(1)

    _kv_start, _seq_len, _per, n_live = _split_plan(
        kv_indptr, cur_batch, batch, work_units, target_ctas, MIN_CHUNK, ALIGN, MAX_SPLITS
    )

    # Requests with exactly one live split were finished by stage 1.
    if n_live != 1:
        offs_d = tl.arange(0, BLOCK_DV)
        mask_d = offs_d < Lv
        lse_base = Mid_Lse + cur_batch * stride_lse_b + cur_head * stride_lse_h
        o_base = Mid_O + cur_batch * stride_mid_ob + cur_head * stride_mid_oh

        if USE_PDL:
            tl.extra.cuda.gdc_wait()

        offs_s = tl.arange(0, MAX_SPLITS)
        lse_all = tl.load(
            lse_base + offs_s * stride_lse_s,
            mask=offs_s < n_live,
            other=-float("inf"),
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


def _workspace(attn_logits, attn_lse, batch, head_num, max_splits, Lv, device):
    if (
        max_splits <= attn_logits.shape[2]
        and attn_logits.dtype == torch.float32
        and attn_lse.dtype == torch.float32
        and attn_logits.shape[-1] >= Lv
        and attn_logits.stride(-1) == 1
    ):
        return attn_logits, attn_lse
    mid_o = torch.empty(
        (batch, head_num, max_splits, Lv), dtype=torch.float32, device=device
    )
    mid_lse = torch.empty(
        (batch, head_num, max_splits), dtype=torch.float32, device=device
    )
    return mid_o, mid_lse


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
    if not (logit_cap is not None and logit_cap > 0):
        # base-2 softmax: fold log2(e) into the score scale (the capped path
        # applies it after the tanh cap inside the kernels)
        sm_scale_withk = sm_scale_withk * _LOG2E
    xai_len = xai_temperature_len if xai_temperature_len is not None else -1
    elt = k_buffer.element_size()

    block_n_cfg = int(CONFIG["BLOCK_N"])
    stages_cfg = int(CONFIG["STAGES"])
    min_chunk_cfg = int(CONFIG["MIN_CHUNK"])
    ctas_per_sm = _CTAS_PER_SM

    BLOCK_DV = triton.next_power_of_2(Lv)
    # PDL only on a real GPU (the Triton interpreter has no grid dependency control)
    use_pdl_launch = _PDL_OK[0] and q.is_cuda

    if kv_group_num == 1:
        BLOCK_DMODEL = triton.next_power_of_2(Lk)
        BLOCK_DPE = 0
        row_bytes = (BLOCK_DMODEL + BLOCK_DV) * elt
        work_units = head_num
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
        work_units = _grouped_head_tiles(head_num, kv_group_num)

    BLOCK_N, num_stages = _fit_pipeline(block_n_cfg, stages_cfg, row_bytes)
    if q.is_cuda:
        ALIGN = max(_MIN_BLOCK_KV, BLOCK_N)
        MIN_CHUNK = triton.cdiv(max(min_chunk_cfg, ALIGN), ALIGN) * ALIGN
        target, max_splits = _plan_splits(
            batch, work_units, _sm_count(device), ctas_per_sm, _MIN_SPLITS
        )
    else:
        # Triton interpreter on the CPU: a tiny plan keeps the number of
        # interpreted programs small and still exercises the multi-split merge.
        ALIGN = 4
        MIN_CHUNK = 4
        target, max_splits = _plan_splits(batch, work_units, 1, ctas_per_sm, 1)
    mid_o, mid_lse = _workspace(
        attn_logits, attn_lse, batch, head_num, max_splits, Lv, device
    )
    grid = (batch, work_units, max_splits)
    s1_args = (
        q,
        k_buffer,
        v_buffer,
        sm_scale_withk,
        kv_indptr,
        kv_indices,
        mid_o,
        mid_lse,
        o,
        sinks,
        float(v_scale),
        batch,
        work_units,
        target,
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
        o.stride(0),
        o.stride(1),
    )

    if kv_group_num == 1:
        s1_kwargs = dict(
            kv_group_num=kv_group_num,
            BLOCK_DMODEL=BLOCK_DMODEL,
            BLOCK_DV=BLOCK_DV,
            BLOCK_N=BLOCK_N,
            MIN_CHUNK=MIN_CHUNK,
            ALIGN=ALIGN,
            MAX_SPLITS=max_splits,
            logit_cap=logit_cap,
            Lk=Lk,
            Lv=Lv,
            xai_temperature_len=xai_len,
            HAS_SINK=sinks is not None,
            num_warps=4,
            num_stages=num_stages,
        )
        use_pdl_launch = _launch_stage1(
            _fwd_kernel_stage1, grid, s1_args, s1_kwargs, use_pdl_launch
        )
    else:
        s1_kwargs = dict(
            kv_group_num=kv_group_num,
            q_head_num=head_num,
            BLOCK_DMODEL=BLOCK_DMODEL,
            BLOCK_DPE=BLOCK_DPE,
            BLOCK_DV=BLOCK_DV,
            BLOCK_N=BLOCK_N,
            BLOCK_H=_GROUPED_BLOCK_H,
            MIN_CHUNK=MIN_CHUNK,
            ALIGN=ALIGN,
            MAX_SPLITS=max_splits,
            logit_cap=logit_cap,
            xai_temperature_len=xai_len,
            Lk=Lk,
            Lv=Lv,
            HAS_MLA=bool(has_mla),
            HAS_SINK=sinks is not None,
            PREFETCH=2 if BLOCK_N <= 32 else 1,
            num_warps=4,
            num_stages=num_stages,
        )
        use_pdl_launch = _launch_stage1(
            _fwd_grouped_kernel_stage1, grid, s1_args, s1_kwargs, use_pdl_launch
        )

    args = (
        mid_o,
        mid_lse,
        o,
        float(v_scale),
        kv_indptr,
        sinks,
        batch,
        work_units,
        target,
        mid_o.stride(0),
        mid_o.stride(1),
        mid_o.stride(2),
        mid_lse.stride(0),
        mid_lse.stride(1),
        mid_lse.stride(2),
        o.stride(0),
        o.stride(1),
    )
    kwargs = dict(
        MIN_CHUNK=MIN_CHUNK,
        ALIGN=ALIGN,
        MAX_SPLITS=max_splits,
        SPLIT_TILE=min(max_splits, 32),
        BLOCK_DV=BLOCK_DV,
        Lv=Lv,
        HAS_SINK=sinks is not None,
        num_warps=2 if BLOCK_DV <= 128 else 4,
        num_stages=1,
    )
    if use_pdl_launch:
        _launch_stage2((batch, head_num), args, kwargs)
    else:
        _fwd_kernel_stage2[(batch, head_num)](*args, USE_PDL=False, **kwargs)


# ---- astra-sglang tune: frozen dispatch table (generated; nothing is tuned when this runs) ----
# Each row: the timed shape (a bucket) and the config the sweep chose there; a call uses the row whose dims
# are nearest to its own (sum of |log| differences). Every row's config passed the harness's checks.
import math as _astra_math

TUNED = [
    ({'B': 128, 'S': 1024, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 1966080, 'MS': 8}, {'BLOCK_N': 64, 'STAGES': 2, 'MIN_CHUNK': 64}),
    ({'B': 32, 'S': 1024, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 2064384, 'MS': 8}, {'BLOCK_N': 32, 'STAGES': 3, 'MIN_CHUNK': 128}),
    ({'B': 1, 'S': 1024, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 2096128, 'MS': 8}, {'BLOCK_N': 64, 'STAGES': 2, 'MIN_CHUNK': 64}),
    ({'B': 1, 'S': 8192, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 2088960, 'MS': 8}, {'BLOCK_N': 32, 'STAGES': 2, 'MIN_CHUNK': 128}),
    ({'B': 16, 'S': 8192, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 1966080, 'MS': 8}, {'BLOCK_N': 64, 'STAGES': 2, 'MIN_CHUNK': 128}),
    ({'B': 32, 'S': 8192, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 1835008, 'MS': 8}, {'BLOCK_N': 64, 'STAGES': 2, 'MIN_CHUNK': 128}),
    ({'B': 128, 'S': 1024, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 2, 'X': 1, 'KX': 1966080, 'MS': 8}, {'BLOCK_N': 64, 'STAGES': 3, 'MIN_CHUNK': 128}),
    ({'B': 256, 'S': 1024, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 2, 'X': 1, 'KX': 1835008, 'MS': 8}, {'BLOCK_N': 64, 'STAGES': 3, 'MIN_CHUNK': 64}),
    ({'B': 64, 'S': 2048, 'NK': 8, 'G': 4, 'D': 128, 'P': 16, 'R': 2, 'X': 1, 'KX': 1966080, 'MS': 8}, {'BLOCK_N': 64, 'STAGES': 3, 'MIN_CHUNK': 128}),
    ({'B': 32, 'S': 8192, 'NK': 8, 'G': 4, 'D': 128, 'P': 16, 'R': 1, 'X': 1, 'KX': 1835008, 'MS': 8}, {'BLOCK_N': 64, 'STAGES': 2, 'MIN_CHUNK': 128}),
    ({'B': 64, 'S': 4096, 'NK': 8, 'G': 8, 'D': 128, 'P': 1, 'R': 2, 'X': 1, 'KX': 1835008, 'MS': 8}, {'BLOCK_N': 64, 'STAGES': 3, 'MIN_CHUNK': 128}),
    ({'B': 8, 'S': 32768, 'NK': 4, 'G': 8, 'D': 128, 'P': 1, 'R': 2, 'X': 1, 'KX': 1835008, 'MS': 8}, {'BLOCK_N': 64, 'STAGES': 2, 'MIN_CHUNK': 128}),
    ({'B': 128, 'S': 2048, 'NK': 2, 'G': 8, 'D': 128, 'P': 1, 'R': 2, 'X': 1, 'KX': 1835008, 'MS': 8}, {'BLOCK_N': 64, 'STAGES': 3, 'MIN_CHUNK': 64}),
    ({'B': 256, 'S': 2048, 'NK': 4, 'G': 4, 'D': 128, 'P': 16, 'R': 2, 'X': 1, 'KX': 1572864, 'MS': 8}, {'BLOCK_N': 64, 'STAGES': 3, 'MIN_CHUNK': 128}),
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
