# Decode attention (GQA / MHA, bf16 / fp16 KV cache) for SGLang's triton backend.
#
# Work-balanced split-KV in ONE launch: the batch's KV rows (kv_indices positions
# kv_indptr[0] .. kv_indptr[B]) are treated as one flat stream per KV head and cut into
# equal chunks, one chunk per program, with the number of programs sized to about one
# wave of the GPU (independent of the batch's lengths, so the launch is CUDA-graph safe;
# everything else is derived on the device from kv_indptr). A program walks the requests
# its chunk overlaps: a request lying wholly inside one chunk is finished in place
# (written straight to `o`); a request cut by chunk boundaries leaves one partial
# (normalised acc + lse) per overlapping chunk, and the program that finishes the LAST
# of those partials (an arrival counter per (kv head, request), self-resetting) merges
# them and writes `o`. No second kernel is launched.
# The scheduler's num_kv_splits is not needed: attn_logits / attn_lse are only
# workspace and the result does not depend on how the KV is split. The per-tile
# arithmetic is the original's (dot path for grouped heads, elementwise path for
# G == 1, natural exp / log), so rounding and overflow behave alike.

import math

import torch
import triton
import triton.language as tl

# TUNE frozen by astra-sglang tune: 1 bucket(s) in TUNED below; swept BLOCK_N=[32, 64], num_stages=[3], num_warps=[4], CTAS_PER_SM=[4, 8]





CONFIG = {'BLOCK_N': 64, 'num_stages': 3, 'num_warps': 4, 'CTAS_PER_SM': 4}

_SM_COUNT = {}
_COUNTERS = {}


def _num_sms(device) -> int:
    # one wave of programs is sized from the SM count (132 on H100 / H200)
    if getattr(device, "type", "cuda") != "cuda":
        return 132
    idx = device.index
    n = _SM_COUNT.get(idx)
    if n is None:
        try:
            dev = idx if idx is not None else torch.cuda.current_device()
            n = int(torch.cuda.get_device_properties(dev).multi_processor_count)
        except Exception:
            n = 132
        _SM_COUNT[idx] = n
    return n


def _arrival_counters(device, n: int):
    # zero-initialised once per device; every launch leaves all counters at zero again
    # (the last arrival of each split request resets its counter)
    key = (getattr(device, "type", "cuda"), getattr(device, "index", None))
    buf = _COUNTERS.get(key)
    if buf is None or buf.numel() < n:
        buf = torch.zeros(max(n, 8192), dtype=torch.int32, device=device)
        _COUNTERS[key] = buf
    return buf


@triton.jit
def _arrive_and_merge(
    Part_O,
    Part_L,
    O,
    Cnt,
    counter_idx,
    b,
    c_first,
    c_last,
    head0,
    v_scale,
    stride_pos,
    stride_poh,
    stride_pls,
    stride_ob,
    stride_oh,
    G: tl.constexpr,
    GP: tl.constexpr,
    Lv: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_J: tl.constexpr,
):
    # every thread's partial stores precede the (single) release of the arrival
    tl.debug_barrier()
    n_part = c_last - c_first + 1
    old = tl.atomic_add(Cnt + counter_idx, 1, sem="acq_rel")
    if old == n_part - 1:
        # last arrival for this (request, kv head): reset the counter for the next
        # launch, then merge the request's partials (read through L2)
        tl.store(Cnt + counter_idx, 0)
        offs_j = tl.arange(0, BLOCK_J)
        offs_g = tl.arange(0, GP)
        offs_d = tl.arange(0, BLOCK_DV)
        mask_g = offs_g < G
        mask_d = offs_d < Lv
        heads = head0 + offs_g
        e_max = tl.full([GP], float("-inf"), dtype=tl.float32)
        e_sum = tl.zeros([GP], dtype=tl.float32)
        acc = tl.zeros([GP, BLOCK_DV], dtype=tl.float32)
        for j0 in tl.range(c_first, c_last + 1, BLOCK_J, num_stages=1):
            jj = j0 + offs_j
            mask_j = jj <= c_last
            slot = (jj + b).to(tl.int64)
            mask_jg = mask_j[:, None] & mask_g[None, :]
            lse = tl.load(
                Part_L + slot[:, None] * stride_pls + heads[None, :],
                mask=mask_jg,
                other=float("-inf"),
                cache_modifier=".cg",
            )
            po = tl.load(
                Part_O
                + slot[:, None, None] * stride_pos
                + heads[None, :, None] * stride_poh
                + offs_d[None, None, :],
                mask=mask_jg[:, :, None] & mask_d[None, None, :],
                other=0.0,
                cache_modifier=".cg",
            )
            n_e_max = tl.maximum(tl.max(lse, 0), e_max)
            old_scale = tl.exp(e_max - n_e_max)
            w = tl.exp(lse - n_e_max[None, :])
            acc = acc * old_scale[:, None] + tl.sum(w[:, :, None] * po, 0)
            e_sum = e_sum * old_scale + tl.sum(w, 0)
            e_max = n_e_max
        tl.store(
            O
            + b.to(tl.int64) * stride_ob
            + heads[:, None] * stride_oh
            + offs_d[None, :],
            (acc / e_sum[:, None] * v_scale).to(O.dtype.element_ty),
            mask=mask_g[:, None] & mask_d[None, :],
        )


@triton.jit
def _decode_fused_kernel(
    Q,
    K_Buffer,
    V_Buffer,
    O,
    kv_indptr,
    kv_indices,
    Part_O,
    Part_L,
    Cnt,
    sm_scale,
    v_scale,
    batch,
    num_progs,
    stride_qb,
    stride_qh,
    stride_kbs,
    stride_kh,
    stride_vbs,
    stride_vh,
    stride_ob,
    stride_oh,
    stride_pos,
    stride_poh,
    stride_pls,
    G: tl.constexpr,
    BLOCK_H: tl.constexpr,
    GP: tl.constexpr,
    Lk: tl.constexpr,
    Lv: tl.constexpr,
    BLOCK_DK: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_J: tl.constexpr,
):
    kv_head = tl.program_id(0)
    pid = tl.program_id(1)

    # all prologue index loads are issued together (one memory round trip)
    offs_b = tl.arange(0, BLOCK_B)
    idx0 = 1 + offs_b
    in0 = idx0 <= batch
    bounds0 = tl.load(kv_indptr + idx0, mask=in0, other=0)
    first_row = tl.load(kv_indptr)
    last_row = tl.load(kv_indptr + batch)
    total = last_row - first_row
    chunk = tl.cdiv(tl.cdiv(total, num_progs), BLOCK_N) * BLOCK_N
    chunk = tl.maximum(chunk, BLOCK_N)
    start = first_row + pid * chunk
    if start < last_row:
        end = tl.minimum(start + chunk, last_row)

        # request b holding row `start`: b = #{i in 1..B : indptr[i] <= start},
        # req_start = indptr[b], req_end = indptr[b + 1]
        le = in0 & (bounds0 <= start)
        gt = in0 & (bounds0 > start)
        cnt = tl.sum(le.to(tl.int32), axis=0)
        req_start = tl.maximum(
            tl.max(tl.where(le, bounds0, first_row), axis=0), first_row
        )
        req_end = tl.min(tl.where(gt, bounds0, last_row), axis=0)
        for b0 in tl.range(BLOCK_B, batch, BLOCK_B, num_stages=1):
            idx = b0 + 1 + offs_b
            in_range = idx <= batch
            bounds = tl.load(kv_indptr + idx, mask=in_range, other=0)
            le_i = in_range & (bounds <= start)
            gt_i = in_range & (bounds > start)
            cnt += tl.sum(le_i.to(tl.int32), axis=0)
            req_start = tl.maximum(
                req_start, tl.max(tl.where(le_i, bounds, first_row), axis=0)
            )
            req_end = tl.minimum(
                req_end, tl.min(tl.where(gt_i, bounds, last_row), axis=0)
            )

        offs_dk = tl.arange(0, BLOCK_DK)
        offs_dv = tl.arange(0, BLOCK_DV)
        mask_dk = offs_dk < Lk
        mask_dv = offs_dv < Lv
        offs_nn = tl.arange(0, BLOCK_N)
        kv_head64 = kv_head.to(tl.int64)

        b = cnt
        pos = start
        while pos < end:
            # prefetch the next request's end while this segment runs
            nxt_end = tl.load(kv_indptr + tl.minimum(b + 2, batch))
            seg_end = tl.minimum(req_end, end)
            if seg_end > pos:
                b64 = b.to(tl.int64)
                whole = (pos == req_start) & (seg_end == req_end)
                slot = (pid + b).to(tl.int64)
                c_first = (req_start - first_row) // chunk
                c_last = (req_end - 1 - first_row) // chunk
                counter_idx = kv_head * num_progs + c_first
                if G == 1:
                    # MHA: one head per program, the original's elementwise path
                    q = tl.load(
                        Q + b64 * stride_qb + kv_head64 * stride_qh + offs_dk,
                        mask=mask_dk,
                        other=0.0,
                    )
                    e_max = -float("inf")
                    e_sum = 0.0
                    acc = tl.zeros([BLOCK_DV], dtype=tl.float32)
                    for n0 in tl.range(pos, seg_end, BLOCK_N):
                        offs_n = n0 + offs_nn
                        mask_n = offs_n < seg_end
                        kv_loc = tl.load(kv_indices + offs_n, mask=mask_n, other=0)
                        k = tl.load(
                            K_Buffer
                            + kv_loc[:, None] * stride_kbs
                            + kv_head64 * stride_kh
                            + offs_dk[None, :],
                            mask=mask_n[:, None] & mask_dk[None, :],
                            other=0.0,
                        )
                        v = tl.load(
                            V_Buffer
                            + kv_loc[:, None] * stride_vbs
                            + kv_head64 * stride_vh
                            + offs_dv[None, :],
                            mask=mask_n[:, None] & mask_dv[None, :],
                            other=0.0,
                        )
                        qk = tl.sum((q[None, :] * k).to(tl.float32), 1)
                        qk *= sm_scale
                        qk = tl.where(mask_n, qk, float("-inf"))
                        n_e_max = tl.maximum(tl.max(qk, 0), e_max)
                        re_scale = tl.exp(e_max - n_e_max)
                        p = tl.exp(qk - n_e_max)
                        acc *= re_scale
                        acc += tl.sum(p[:, None] * v, 0)
                        e_sum = e_sum * re_scale + tl.sum(p, 0)
                        e_max = n_e_max
                    if whole:
                        tl.store(
                            O + b64 * stride_ob + kv_head64 * stride_oh + offs_dv,
                            (acc / e_sum * v_scale).to(O.dtype.element_ty),
                            mask=mask_dv,
                        )
                    else:
                        tl.store(
                            Part_O + slot * stride_pos + kv_head64 * stride_poh + offs_dv,
                            acc / e_sum,
                            mask=mask_dv,
                        )
                        tl.store(
                            Part_L + slot * stride_pls + kv_head64,
                            e_max + tl.log(e_sum),
                        )
                        _arrive_and_merge(
                            Part_O,
                            Part_L,
                            O,
                            Cnt,
                            counter_idx,
                            b,
                            c_first,
                            c_last,
                            kv_head,
                            v_scale,
                            stride_pos,
                            stride_poh,
                            stride_pls,
                            stride_ob,
                            stride_oh,
                            G,
                            GP,
                            Lv,
                            BLOCK_DV,
                            BLOCK_J,
                        )
                else:
                    # grouped heads: all G query heads of this KV head share each tile
                    offs_h = tl.arange(0, BLOCK_H)
                    mask_h = offs_h < G
                    cur_heads = kv_head * G + offs_h
                    mask_hd = mask_h[:, None] & mask_dv[None, :]
                    q = tl.load(
                        Q
                        + b64 * stride_qb
                        + cur_heads[:, None] * stride_qh
                        + offs_dk[None, :],
                        mask=mask_h[:, None] & mask_dk[None, :],
                        other=0.0,
                    )
                    q = q.to(K_Buffer.dtype.element_ty)
                    e_max = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
                    e_sum = tl.zeros([BLOCK_H], dtype=tl.float32)
                    acc = tl.zeros([BLOCK_H, BLOCK_DV], dtype=tl.float32)
                    for n0 in tl.range(pos, seg_end, BLOCK_N):
                        offs_n = n0 + offs_nn
                        mask_n = offs_n < seg_end
                        kv_loc = tl.load(kv_indices + offs_n, mask=mask_n, other=0)
                        k = tl.load(
                            K_Buffer
                            + kv_loc[None, :] * stride_kbs
                            + kv_head64 * stride_kh
                            + offs_dk[:, None],
                            mask=mask_n[None, :] & mask_dk[:, None],
                            other=0.0,
                        )
                        v = tl.load(
                            V_Buffer
                            + kv_loc[:, None] * stride_vbs
                            + kv_head64 * stride_vh
                            + offs_dv[None, :],
                            mask=mask_n[:, None] & mask_dv[None, :],
                            other=0.0,
                        )
                        qk = tl.dot(q, k)
                        qk *= sm_scale
                        qk = tl.where(
                            mask_h[:, None] & mask_n[None, :], qk, float("-inf")
                        )
                        n_e_max = tl.maximum(tl.max(qk, 1), e_max)
                        re_scale = tl.exp(e_max - n_e_max)
                        p = tl.exp(qk - n_e_max[:, None])
                        acc *= re_scale[:, None]
                        acc += tl.dot(p.to(v.dtype), v)
                        e_sum = e_sum * re_scale + tl.sum(p, 1)
                        e_max = n_e_max
                    if whole:
                        tl.store(
                            O
                            + b64 * stride_ob
                            + cur_heads[:, None] * stride_oh
                            + offs_dv[None, :],
                            (acc / e_sum[:, None] * v_scale).to(O.dtype.element_ty),
                            mask=mask_hd,
                        )
                    else:
                        tl.store(
                            Part_O
                            + slot * stride_pos
                            + cur_heads[:, None] * stride_poh
                            + offs_dv[None, :],
                            acc / e_sum[:, None],
                            mask=mask_hd,
                        )
                        tl.store(
                            Part_L + slot * stride_pls + cur_heads,
                            e_max + tl.log(e_sum),
                            mask=mask_h,
                        )
                        _arrive_and_merge(
                            Part_O,
                            Part_L,
                            O,
                            Cnt,
                            counter_idx,
                            b,
                            c_first,
                            c_last,
                            kv_head * G,
                            v_scale,
                            stride_pos,
                            stride_poh,
                            stride_pls,
                            stride_ob,
                            stride_oh,
                            G,
                            GP,
                            Lv,
                            BLOCK_DV,
                            BLOCK_J,
                        )
            pos = tl.maximum(seg_end, pos)
            b += 1
            req_start = req_end
            req_end = nxt_end


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
    # bf16 / fp16 KV cache in 3-D [slots, kv_heads, head_dim] buffers: with token-slot
    # kv_indices the paged address (slot // P) * P + slot % P is the slot itself, so
    # page_size needs no special handling. num_kv_splits is not needed (the split is
    # chosen on the device); attn_logits / attn_lse serve as workspace when large enough.
    assert max_kv_splits == attn_logits.shape[2]
    assert q.shape[0] <= kv_indptr.shape[0] - 1

    batch, head_num = q.shape[0], q.shape[1]
    if batch == 0:
        return
    num_kv_heads = k_buffer.shape[-2]
    G = head_num // num_kv_heads
    Lk = k_buffer.shape[-1]
    Lv = v_buffer.shape[-1]

    cfg = CONFIG
    BLOCK_N = int(cfg["BLOCK_N"])
    num_stages = int(cfg["num_stages"])
    num_warps = int(cfg["num_warps"])
    ctas_per_sm = int(cfg["CTAS_PER_SM"])

    BLOCK_DK = max(16, triton.next_power_of_2(Lk))
    BLOCK_DV = max(16, triton.next_power_of_2(Lv))
    BLOCK_H = max(16, triton.next_power_of_2(G))
    GP = max(2, triton.next_power_of_2(G))
    BLOCK_J = max(2, min(16, 4096 // (GP * BLOCK_DV)))
    stage_bytes = BLOCK_N * (BLOCK_DK + BLOCK_DV) * k_buffer.element_size()
    while num_stages > 1 and num_stages * stage_bytes > 160 * 1024:
        num_stages -= 1

    num_progs = max(1, (_num_sms(q.device) * ctas_per_sm) // num_kv_heads)
    n_slots = num_progs + batch

    need_o = n_slots * head_num * Lv
    if (
        attn_logits.dtype == torch.float32
        and attn_logits.is_contiguous()
        and attn_logits.numel() >= need_o
    ):
        part_o = attn_logits.view(-1)[:need_o].view(n_slots, head_num, Lv)
    else:
        part_o = torch.empty(
            (n_slots, head_num, Lv), dtype=torch.float32, device=q.device
        )
    need_l = n_slots * head_num
    if (
        attn_lse.dtype == torch.float32
        and attn_lse.is_contiguous()
        and attn_lse.numel() >= need_l
    ):
        part_l = attn_lse.view(-1)[:need_l].view(n_slots, head_num)
    else:
        part_l = torch.empty((n_slots, head_num), dtype=torch.float32, device=q.device)

    counters = _arrival_counters(q.device, num_kv_heads * num_progs)

    if isinstance(k_scale, torch.Tensor):
        k_scale = float(k_scale.item())
    if isinstance(v_scale, torch.Tensor):
        v_scale = float(v_scale.item())
    sm_scale_withk = float(sm_scale) * float(k_scale)

    BLOCK_B = min(1024, max(16, triton.next_power_of_2(batch)))

    _decode_fused_kernel[(num_kv_heads, num_progs)](
        q,
        k_buffer,
        v_buffer,
        o,
        kv_indptr,
        kv_indices,
        part_o,
        part_l,
        counters,
        sm_scale_withk,
        float(v_scale),
        batch,
        num_progs,
        q.stride(0),
        q.stride(1),
        k_buffer.stride(0),
        k_buffer.stride(1),
        v_buffer.stride(0),
        v_buffer.stride(1),
        o.stride(0),
        o.stride(1),
        part_o.stride(0),
        part_o.stride(1),
        part_l.stride(0),
        G=G,
        BLOCK_H=BLOCK_H,
        GP=GP,
        Lk=Lk,
        Lv=Lv,
        BLOCK_DK=BLOCK_DK,
        BLOCK_DV=BLOCK_DV,
        BLOCK_N=BLOCK_N,
        BLOCK_B=BLOCK_B,
        BLOCK_J=BLOCK_J,
        num_warps=num_warps,
        num_stages=num_stages,
    )

# ---- astra-sglang tune: one config won on every timed shape ----
TUNED = [
    ({'B': 128, 'S': 1024, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 1966080, 'MS': 8}, {'BLOCK_N': 64, 'num_stages': 3, 'num_warps': 4, 'CTAS_PER_SM': 4}),
]
