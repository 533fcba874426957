"""merge_state round 2. SCRIPTED candidate written by the astra-sglang developers for tests; not produced by a language model.

Tried: Fix of round 1 (parenthesis). Also 'tightened' the head-dim mask.
Known defect: Off-by-one in the head-dim mask (cols < HEAD_SIZE - 1): the last element of every head is never written.
Expected: incorrect on every shape (NaN/unwritten last element of each head); never chosen.
"""

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl


@triton.jit
def _merge_tile_kernel(
    out_ptr, out_lse_ptr, p_out_ptr, p_lse_ptr, s_out_ptr, s_lse_ptr, n_rows,
    HEAD_SIZE: tl.constexpr, PADDED_HEAD_SIZE: tl.constexpr, ROWS: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    p_lse = tl.load(p_lse_ptr + rows, mask=row_ok, other=0.0)
    s_lse = tl.load(s_lse_ptr + rows, mask=row_ok, other=0.0)
    p_lse = tl.where(p_lse == float("inf"), float("-inf"), p_lse)
    s_lse = tl.where(s_lse == float("inf"), float("-inf"), s_lse)
    max_lse = tl.maximum(p_lse, s_lse)
    p_lse = p_lse - max_lse
    s_lse = s_lse - max_lse
    out_se = tl.exp(p_lse) + tl.exp(s_lse)
    tl.store(out_lse_ptr + rows, tl.log(out_se) + max_lse, mask=row_ok)
    p_scale = tl.exp(p_lse) / out_se
    s_scale = tl.exp(s_lse) / out_se
    cols = tl.arange(0, PADDED_HEAD_SIZE)
    offs = rows[:, None] * HEAD_SIZE + cols[None, :]
    mask = row_ok[:, None] & (cols[None, :] < HEAD_SIZE - 1)
    p_out = tl.load(p_out_ptr + offs, mask=mask)
    s_out = tl.load(s_out_ptr + offs, mask=mask)
    out = p_out * p_scale[:, None] + s_out * s_scale[:, None]
    tl.store(out_ptr + offs, out, mask=mask)


def merge_state_triton(
    prefix_output: torch.Tensor,
    prefix_lse: torch.Tensor,
    suffix_output: torch.Tensor,
    suffix_lse: torch.Tensor,
    output: Optional[torch.Tensor] = None,
    output_lse: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    if output is None:
        output = torch.empty_like(prefix_output)
    if output_lse is None:
        output_lse = torch.empty_like(prefix_lse)
    num_tokens, num_heads, head_size = output.shape
    n_rows = num_tokens * num_heads
    if n_rows == 0:
        return output, output_lse
    padded = triton.next_power_of_2(head_size)
    rows = 8
    _merge_tile_kernel[(triton.cdiv(n_rows, rows),)](
        output, output_lse, prefix_output, prefix_lse, suffix_output, suffix_lse, n_rows,
        HEAD_SIZE=head_size, PADDED_HEAD_SIZE=padded, ROWS=rows, num_warps=4,
    )
    return output, output_lse
