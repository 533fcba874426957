from typing import Optional, Tuple

import torch
import triton
import triton.language as tl


# Launch parameters. TILE = target number of elements per tensor handled by one
# program (rows_per_program * padded_head_size); EVICT = use streaming cache hints.
# TUNE frozen by astra-sglang tune: 4 bucket(s) in TUNED below; swept TILE=[2048, 4096, 8192], num_warps=[4, 8], EVICT=[0, 1]
CONFIG = {'TILE': 2048, 'num_warps': 4, 'EVICT': 0}

# Below this many programs we shrink the rows per program so that small
# (decode) shapes still spread over the 132 SMs.
_MIN_PROGRAMS = 264


@triton.jit
def merge_state_rows_kernel(
    output,  # [R, HEAD_SIZE] v_merged   (R = NUM_TOKENS * NUM_HEADS)
    output_lse,  # [R] s_merged
    prefix_output,  # [R, HEAD_SIZE] v_a
    prefix_lse,  # [R] s_a
    suffix_output,  # [R, HEAD_SIZE] v_b
    suffix_lse,  # [R] s_b
    num_rows,
    HEAD_SIZE: tl.constexpr,
    PADDED_HEAD_SIZE: tl.constexpr,
    BLOCK_R: tl.constexpr,
    OUTPUT_LSE: tl.constexpr,
    NEED_ROW_MASK: tl.constexpr,
    NEED_COL_MASK: tl.constexpr,
    EVICT: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid.to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, PADDED_HEAD_SIZE)
    offs = rows[:, None] * HEAD_SIZE + cols[None, :]

    # ---- per-row LSEs -------------------------------------------------------
    if NEED_ROW_MASK:
        row_mask = rows < num_rows
        p_lse = tl.load(prefix_lse + rows, mask=row_mask, other=0.0)
        s_lse = tl.load(suffix_lse + rows, mask=row_mask, other=0.0)
    else:
        p_lse = tl.load(prefix_lse + rows)
        s_lse = tl.load(suffix_lse + rows)

    # ---- data tiles -----------------------------------------------------------
    if NEED_ROW_MASK or NEED_COL_MASK:
        if NEED_ROW_MASK:
            if NEED_COL_MASK:
                mask = (rows < num_rows)[:, None] & (cols < HEAD_SIZE)[None, :]
            else:
                mask = (rows < num_rows)[:, None] & (cols < PADDED_HEAD_SIZE)[None, :]
        else:
            mask = (rows >= 0)[:, None] & (cols < HEAD_SIZE)[None, :]
        if EVICT:
            p_out = tl.load(prefix_output + offs, mask=mask, other=0.0,
                            eviction_policy="evict_first")
            s_out = tl.load(suffix_output + offs, mask=mask, other=0.0,
                            eviction_policy="evict_first")
        else:
            p_out = tl.load(prefix_output + offs, mask=mask, other=0.0)
            s_out = tl.load(suffix_output + offs, mask=mask, other=0.0)
    else:
        if EVICT:
            p_out = tl.load(prefix_output + offs, eviction_policy="evict_first")
            s_out = tl.load(suffix_output + offs, eviction_policy="evict_first")
        else:
            p_out = tl.load(prefix_output + offs)
            s_out = tl.load(suffix_output + offs)

    # ---- scales (same arithmetic as the original kernel) ----------------------
    p_lse = tl.where(p_lse == float("inf"), float("-inf"), p_lse)
    s_lse = tl.where(s_lse == float("inf"), float("-inf"), s_lse)

    max_lse = tl.maximum(p_lse, s_lse)
    p_lse = p_lse - max_lse
    s_lse = s_lse - max_lse
    p_se = tl.exp(p_lse)
    s_se = tl.exp(s_lse)
    out_se = p_se + s_se

    if OUTPUT_LSE:
        out_lse = tl.log(out_se) + max_lse
        if NEED_ROW_MASK:
            tl.store(output_lse + rows, out_lse, mask=rows < num_rows)
        else:
            tl.store(output_lse + rows, out_lse)

    p_scale = p_se / out_se
    s_scale = s_se / out_se
    out = p_out.to(tl.float32) * p_scale[:, None] + s_out.to(tl.float32) * s_scale[:, None]
    out = out.to(output.dtype.element_ty)

    if NEED_ROW_MASK or NEED_COL_MASK:
        if EVICT:
            tl.store(output + offs, out, mask=mask, eviction_policy="evict_first")
        else:
            tl.store(output + offs, out, mask=mask)
    else:
        if EVICT:
            tl.store(output + offs, out, eviction_policy="evict_first")
        else:
            tl.store(output + offs, out)


def merge_state_triton(
    prefix_output: torch.Tensor,
    prefix_lse: torch.Tensor,
    suffix_output: torch.Tensor,
    suffix_lse: torch.Tensor,
    output: Optional[torch.Tensor] = None,
    output_lse: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    # Avoid creating new tensors if they are already provided
    if output is None:
        output = torch.empty_like(prefix_output)
    if output_lse is None:
        output_lse = torch.empty_like(prefix_lse)

    num_tokens = output.shape[0]
    num_query_heads = output.shape[1]
    head_size = output.shape[2]
    num_rows = num_tokens * num_query_heads
    if num_rows == 0 or head_size == 0:
        return output, output_lse
    padded_head_size = triton.next_power_of_2(head_size)

    tile = int(CONFIG["TILE"])
    num_warps = int(CONFIG["num_warps"])
    evict = int(CONFIG["EVICT"])

    block_r = max(1, tile // padded_head_size)
    block_r = min(block_r, triton.next_power_of_2(num_rows))
    while block_r > 1 and triton.cdiv(num_rows, block_r) < _MIN_PROGRAMS:
        block_r //= 2

    elems = block_r * padded_head_size
    # avoid mostly-replicated threads on tiny tiles
    while num_warps > 1 and elems < num_warps * 32 * 4:
        num_warps //= 2
    # keep per-thread register footprint bounded for very large head dims
    while num_warps < 16 and elems > num_warps * 32 * 32:
        num_warps *= 2

    grid = (triton.cdiv(num_rows, block_r),)
    merge_state_rows_kernel[grid](
        output,
        output_lse,
        prefix_output,
        prefix_lse,
        suffix_output,
        suffix_lse,
        num_rows,
        HEAD_SIZE=head_size,
        PADDED_HEAD_SIZE=padded_head_size,
        BLOCK_R=block_r,
        OUTPUT_LSE=output_lse is not None,
        NEED_ROW_MASK=(num_rows % block_r) != 0,
        NEED_COL_MASK=head_size != padded_head_size,
        EVICT=evict,
        num_warps=num_warps,
    )
    return output, output_lse


# ---- astra-sglang tune: frozen dispatch table (generated; nothing is tuned when this runs) ----
# Each row: the timed shape (a bucket) and the config the sweep chose there; a call uses the row whose dims
# are nearest to its own (sum of |log| differences). Every row's config passed the harness's checks.
import math as _astra_math

TUNED = [
    ({'T': 512, 'NH': 40, 'D': 128}, {'TILE': 2048, 'num_warps': 4, 'EVICT': 0}),
    ({'T': 512, 'NH': 32, 'D': 256}, {'TILE': 8192, 'num_warps': 4, 'EVICT': 0}),
    ({'T': 512, 'NH': 64, 'D': 128}, {'TILE': 8192, 'num_warps': 8, 'EVICT': 0}),
    ({'T': 768, 'NH': 32, 'D': 256}, {'TILE': 4096, 'num_warps': 8, 'EVICT': 0}),
]


def _astra_dims(args, kwargs):
    dims = {}
    dims['T'] = int((args[0] if len(args) > 0 else kwargs['prefix_output']).shape[0])
    dims['NH'] = int((args[0] if len(args) > 0 else kwargs['prefix_output']).shape[1])
    dims['D'] = int((args[0] if len(args) > 0 else kwargs['prefix_output']).shape[2])
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


_astra_untuned_merge_state_triton = merge_state_triton


def merge_state_triton(*args, **kwargs):
    CONFIG.update(_astra_config(args, kwargs))
    return _astra_untuned_merge_state_triton(*args, **kwargs)
