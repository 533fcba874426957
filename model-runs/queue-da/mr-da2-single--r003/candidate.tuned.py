# Decode attention (GQA / MHA, bf16 / fp16 KV cache) for SGLang's triton backend.
#
# Work-balanced split-KV. Per KV head, the batch's KV rows (kv_indices positions kv_indptr[0]
# .. kv_indptr[B]) form one flat stream. Each request also carries OVH "virtual rows" of
# fixed cost: its pipeline refill (kv_indptr -> q / kv_indices -> K/V round trips), its
# partial tail tile and its output store. So request b spans the virtual range
# [V(b), V(b+1)) with V(i) = kv_indptr[i] - kv_indptr[0] + i * OVH, and its real rows sit in
# the last len_b units of that range. The virtual stream is cut into equal chunks, one chunk
# per program. The number of programs is sized from the SM count, not from the batch's
# lengths, so the launch is CUDA-graph safe; everything else is derived on the device from
# kv_indptr. A program whose chunk has many short requests thus gets fewer rows, which keeps
# mixed-length batches balanced.
# A program walks the requests its chunk overlaps. A request lying wholly inside one chunk is
# finished in place (written straight to `o`). A request cut by chunk boundaries leaves one
# partial (normalised acc + lse) per overlapping chunk, and stage 2 merges those.
# Stage 2 is launched with programmatic dependent launch where available. Its programs read
# kv_indptr and leave, or wait for stage 1 (griddepcontrol.wait), while stage 1 still runs.
# Without PDL it falls back to a plain launch.
# The scheduler's num_kv_splits is not needed: attn_logits / attn_lse are only workspace, and
# the result does not depend on how the KV is split. The per-tile arithmetic is the
# original's (dot path for grouped heads, elementwise path for G == 1, natural exp / log),
# so rounding and overflow behave alike.

import math

import torch
import triton
import triton.language as tl

# TUNE frozen by astra-sglang tune: 14 bucket(s) in TUNED below; swept BLOCK_N=[32, 64], num_stages=[3], num_warps=[4], CTAS_PER_SM=[4, 8], OVH=[40, 120]






CONFIG = {'BLOCK_N': 64, 'num_stages': 3, 'num_warps': 4, 'CTAS_PER_SM': 8, 'OVH': 120}

_SM_COUNT = {}
_CAPABILITY = {}
_PDL_STATE = {"enabled": None}


def _num_sms(device) -> int:
    # programs are sized from the SM count (132 on H100 / H200)
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


def _pdl_wanted(device) -> bool:
    # programmatic dependent launch: compiled (not interpreted) kernels on sm_90+ only
    if _PDL_STATE["enabled"] is False:
        return False
    if getattr(device, "type", "cpu") != "cuda":
        return False
    # an interpreted kernel (TRITON_INTERPRET) is not a plain JITFunction
    if type(_decode_split_stage2).__name__ != "JITFunction":
        return False
    jit_cls = getattr(triton, "JITFunction", None)
    if jit_cls is None or not isinstance(_decode_split_stage2, jit_cls):
        return False
    if getattr(torch.version, "hip", None):
        return False
    idx = device.index
    cap = _CAPABILITY.get(idx)
    if cap is None:
        try:
            dev = idx if idx is not None else torch.cuda.current_device()
            cap = int(torch.cuda.get_device_capability(dev)[0])
        except Exception:
            cap = 0
        _CAPABILITY[idx] = cap
    return cap >= 9


@triton.jit
def _decode_split_stage1(
    Q,
    K_Buffer,
    V_Buffer,
    O,
    kv_indptr,
    kv_indices,
    Part_O,
    Part_L,
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
    Lk: tl.constexpr,
    Lv: tl.constexpr,
    BLOCK_DK: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_B: tl.constexpr,
    OVH: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    kv_head = tl.program_id(0)
    pid = tl.program_id(1)
    if USE_PDL:
        # every program of this grid is resident once all have passed here: let stage 2
        # be scheduled (it waits on griddepcontrol.wait before touching our outputs)
        tl.extra.cuda.gdc_launch_dependents()

    # prologue: the three index loads are independent and go out together
    offs_b = tl.arange(0, BLOCK_B)
    idx0 = 1 + offs_b
    in0 = idx0 <= batch
    first_row = tl.load(kv_indptr)
    last_row = tl.load(kv_indptr + batch)
    bounds0 = tl.load(kv_indptr + idx0, mask=in0, other=0)

    vtot = (last_row - first_row) + batch * OVH
    vchunk = tl.cdiv(tl.cdiv(vtot, num_progs), BLOCK_N) * BLOCK_N
    vchunk = tl.maximum(vchunk, BLOCK_N)
    vs = pid * vchunk
    if vs < vtot:
        ve = tl.minimum(vs + vchunk, vtot)

        # request holding virtual position vs: #{i in 1..B : V(i) <= vs}
        cnt = tl.sum(
            (((bounds0 - first_row) + idx0 * OVH <= vs) & in0).to(tl.int32), axis=0
        )
        for b0 in tl.range(BLOCK_B, batch, BLOCK_B, num_stages=1):
            idx = b0 + 1 + offs_b
            in_range = idx <= batch
            bounds = tl.load(kv_indptr + idx, mask=in_range, other=0)
            cnt += tl.sum(
                (((bounds - first_row) + idx * OVH <= vs) & in_range).to(tl.int32),
                axis=0,
            )

        offs_dk = tl.arange(0, BLOCK_DK)
        offs_dv = tl.arange(0, BLOCK_DV)
        mask_dk = offs_dk < Lk
        mask_dv = offs_dv < Lv
        offs_nn = tl.arange(0, BLOCK_N)
        kv_head64 = kv_head.to(tl.int64)

        b = cnt
        vpos = vs
        while vpos < ve:
            req_start = tl.load(kv_indptr + b)
            req_end = tl.load(kv_indptr + b + 1)
            # virtual range of this request's rows: [v_lo, v_hi)
            v_lo = (req_start - first_row) + b * OVH + OVH
            v_hi = (req_end - first_row) + (b + 1) * OVH
            lo = tl.maximum(vpos, v_lo)
            hi = tl.minimum(ve, v_hi)
            if hi > lo:
                pos = req_start + (lo - v_lo)
                seg_end = req_start + (hi - v_lo)
                b64 = b.to(tl.int64)
                whole = (lo == v_lo) & (hi == v_hi)
                slot = (pid + b).to(tl.int64)
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
                        qk = tl.sum((q[None, :] * k).to(tl.float32), 1)
                        qk *= sm_scale
                        qk = tl.where(mask_n, qk, float("-inf"))
                        v = tl.load(
                            V_Buffer
                            + kv_loc[:, None] * stride_vbs
                            + kv_head64 * stride_vh
                            + offs_dv[None, :],
                            mask=mask_n[:, None] & mask_dv[None, :],
                            other=0.0,
                        )
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
                        qk = tl.dot(q, k)
                        qk *= sm_scale
                        qk = tl.where(
                            mask_h[:, None] & mask_n[None, :], qk, float("-inf")
                        )
                        v = tl.load(
                            V_Buffer
                            + kv_loc[:, None] * stride_vbs
                            + kv_head64 * stride_vh
                            + offs_dv[None, :],
                            mask=mask_n[:, None] & mask_dv[None, :],
                            other=0.0,
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
            vpos = v_hi
            b += 1


@triton.jit
def _decode_split_stage2(
    Part_O,
    Part_L,
    O,
    kv_indptr,
    v_scale,
    batch,
    num_progs,
    stride_pos,
    stride_poh,
    stride_pls,
    stride_ob,
    stride_oh,
    Lv: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_P: tl.constexpr,
    OVH: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    head = tl.program_id(0)
    b = tl.program_id(1)

    # kv_indptr is an input (stage 1 does not write it): safe to read before the wait
    first_row = tl.load(kv_indptr)
    last_row = tl.load(kv_indptr + batch)
    req_start = tl.load(kv_indptr + b)
    req_end = tl.load(kv_indptr + b + 1)
    vtot = (last_row - first_row) + batch * OVH
    vchunk = tl.cdiv(tl.cdiv(vtot, num_progs), BLOCK_N) * BLOCK_N
    vchunk = tl.maximum(vchunk, BLOCK_N)
    v_lo = (req_start - first_row) + b * OVH + OVH
    v_hi = (req_end - first_row) + (b + 1) * OVH
    first = v_lo // vchunk
    last = (v_hi - 1) // vchunk
    n_part = tl.where(req_end > req_start, last - first + 1, 0)
    if USE_PDL:
        # program (0, 0) always waits, so this grid never completes before stage 1
        if (n_part != 1) | ((head == 0) & (b == 0)):
            tl.extra.cuda.gdc_wait()
    # n_part == 1: stage 1 already wrote o for this request
    if n_part != 1:
        offs_p = tl.arange(0, BLOCK_P)
        offs_d = tl.arange(0, BLOCK_DV)
        mask_d = offs_d < Lv
        e_max = -float("inf")
        e_sum = 0.0
        acc = tl.zeros([BLOCK_DV], dtype=tl.float32)
        stop = first + n_part
        for j0 in range(first, stop, BLOCK_P):
            jj = j0 + offs_p
            mask_p = jj < stop
            slot = (jj + b).to(tl.int64)
            lse = tl.load(
                Part_L + slot * stride_pls + head, mask=mask_p, other=float("-inf")
            )
            po = tl.load(
                Part_O + slot[:, None] * stride_pos + head * stride_poh + offs_d[None, :],
                mask=mask_p[:, None] & mask_d[None, :],
                other=0.0,
            )
            n_e_max = tl.maximum(tl.max(lse, 0), e_max)
            old_scale = tl.exp(e_max - n_e_max)
            w = tl.exp(lse - n_e_max)
            acc = acc * old_scale + tl.sum(w[:, None] * po, 0)
            e_sum = e_sum * old_scale + tl.sum(w, 0)
            e_max = n_e_max
        tl.store(
            O + b.to(tl.int64) * stride_ob + head * stride_oh + offs_d,
            (acc / e_sum * v_scale).to(O.dtype.element_ty),
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
    OVH = int(cfg.get("OVH", 0))

    BLOCK_DK = max(16, triton.next_power_of_2(Lk))
    BLOCK_DV = max(16, triton.next_power_of_2(Lv))
    BLOCK_H = max(16, triton.next_power_of_2(G))
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

    if isinstance(k_scale, torch.Tensor):
        k_scale = float(k_scale.item())
    if isinstance(v_scale, torch.Tensor):
        v_scale = float(v_scale.item())
    sm_scale_withk = float(sm_scale) * float(k_scale)
    v_scale_f = float(v_scale)

    BLOCK_B = min(1024, max(16, triton.next_power_of_2(batch)))

    def _launch(pdl):
        _decode_split_stage1[(num_kv_heads, num_progs)](
            q,
            k_buffer,
            v_buffer,
            o,
            kv_indptr,
            kv_indices,
            part_o,
            part_l,
            sm_scale_withk,
            v_scale_f,
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
            Lk=Lk,
            Lv=Lv,
            BLOCK_DK=BLOCK_DK,
            BLOCK_DV=BLOCK_DV,
            BLOCK_N=BLOCK_N,
            BLOCK_B=BLOCK_B,
            OVH=OVH,
            USE_PDL=pdl,
            num_warps=num_warps,
            num_stages=num_stages,
        )
        extra = {"launch_pdl": True} if pdl else {}
        _decode_split_stage2[(head_num, batch)](
            part_o,
            part_l,
            o,
            kv_indptr,
            v_scale_f,
            batch,
            num_progs,
            part_o.stride(0),
            part_o.stride(1),
            part_l.stride(0),
            o.stride(0),
            o.stride(1),
            Lv=Lv,
            BLOCK_DV=BLOCK_DV,
            BLOCK_N=BLOCK_N,
            BLOCK_P=32,
            OVH=OVH,
            USE_PDL=pdl,
            num_warps=4,
            num_stages=2,
            **extra,
        )

    if _pdl_wanted(q.device):
        try:
            _launch(True)
            _PDL_STATE["enabled"] = True
            return
        except Exception:
            # this Triton build has no PDL support: use plain launches from now on
            _PDL_STATE["enabled"] = False
    _launch(False)


# ---- astra-sglang tune: frozen dispatch table (generated; nothing is tuned when this runs) ----
# Each row: the timed shape (a bucket) and the config the sweep chose there; a call uses the row whose dims
# are nearest to its own (sum of |log| differences). Every row's config passed the harness's checks.
import math as _astra_math

TUNED = [
    ({'B': 128, 'S': 1024, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 1966080, 'MS': 8}, {'BLOCK_N': 64, 'num_stages': 3, 'num_warps': 4, 'CTAS_PER_SM': 8, 'OVH': 120}),
    ({'B': 32, 'S': 1024, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 2064384, 'MS': 8}, {'BLOCK_N': 64, 'num_stages': 3, 'num_warps': 4, 'CTAS_PER_SM': 8, 'OVH': 120}),
    ({'B': 1, 'S': 1024, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 2096128, 'MS': 8}, {'BLOCK_N': 64, 'num_stages': 3, 'num_warps': 4, 'CTAS_PER_SM': 8, 'OVH': 120}),
    ({'B': 1, 'S': 8192, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 2088960, 'MS': 8}, {'BLOCK_N': 64, 'num_stages': 3, 'num_warps': 4, 'CTAS_PER_SM': 4, 'OVH': 120}),
    ({'B': 16, 'S': 8192, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 1966080, 'MS': 8}, {'BLOCK_N': 64, 'num_stages': 3, 'num_warps': 4, 'CTAS_PER_SM': 8, 'OVH': 120}),
    ({'B': 32, 'S': 8192, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 1, 'X': 1, 'KX': 1835008, 'MS': 8}, {'BLOCK_N': 64, 'num_stages': 3, 'num_warps': 4, 'CTAS_PER_SM': 8, 'OVH': 120}),
    ({'B': 128, 'S': 1024, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 2, 'X': 1, 'KX': 1966080, 'MS': 8}, {'BLOCK_N': 64, 'num_stages': 3, 'num_warps': 4, 'CTAS_PER_SM': 8, 'OVH': 120}),
    ({'B': 256, 'S': 1024, 'NK': 8, 'G': 4, 'D': 128, 'P': 1, 'R': 2, 'X': 1, 'KX': 1835008, 'MS': 8}, {'BLOCK_N': 64, 'num_stages': 3, 'num_warps': 4, 'CTAS_PER_SM': 8, 'OVH': 120}),
    ({'B': 64, 'S': 2048, 'NK': 8, 'G': 4, 'D': 128, 'P': 16, 'R': 2, 'X': 1, 'KX': 1966080, 'MS': 8}, {'BLOCK_N': 32, 'num_stages': 3, 'num_warps': 4, 'CTAS_PER_SM': 4, 'OVH': 40}),
    ({'B': 32, 'S': 8192, 'NK': 8, 'G': 4, 'D': 128, 'P': 16, 'R': 1, 'X': 1, 'KX': 1835008, 'MS': 8}, {'BLOCK_N': 64, 'num_stages': 3, 'num_warps': 4, 'CTAS_PER_SM': 8, 'OVH': 120}),
    ({'B': 64, 'S': 4096, 'NK': 8, 'G': 8, 'D': 128, 'P': 1, 'R': 2, 'X': 1, 'KX': 1835008, 'MS': 8}, {'BLOCK_N': 32, 'num_stages': 3, 'num_warps': 4, 'CTAS_PER_SM': 4, 'OVH': 40}),
    ({'B': 8, 'S': 32768, 'NK': 4, 'G': 8, 'D': 128, 'P': 1, 'R': 2, 'X': 1, 'KX': 1835008, 'MS': 8}, {'BLOCK_N': 64, 'num_stages': 3, 'num_warps': 4, 'CTAS_PER_SM': 8, 'OVH': 120}),
    ({'B': 128, 'S': 2048, 'NK': 2, 'G': 8, 'D': 128, 'P': 1, 'R': 2, 'X': 1, 'KX': 1835008, 'MS': 8}, {'BLOCK_N': 64, 'num_stages': 3, 'num_warps': 4, 'CTAS_PER_SM': 8, 'OVH': 40}),
    ({'B': 256, 'S': 2048, 'NK': 4, 'G': 4, 'D': 128, 'P': 16, 'R': 2, 'X': 1, 'KX': 1572864, 'MS': 8}, {'BLOCK_N': 64, 'num_stages': 3, 'num_warps': 4, 'CTAS_PER_SM': 8, 'OVH': 120}),
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
