"""merge_state_triton, tunable candidate with ONE deliberately wrong config (written by the astra-sglang
developers; not produced by a language model).

Bug: with ROWS == 4 the wrapper rounds the grid down, so the last ``n_rows % 4`` rows are never written (their
outputs keep the harness's NaN poison); every other config is right.
What must catch it: the sweep's quick check drops that config (it is never timed or chosen), and the frozen
source holds only correct configs (tests/test_sweep.py).
"""

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

# The harness sweeps every combination (docs/harness.md, "Tunable candidates") and freezes its choice
# per shape into a TUNED table; the wrapper reads CONFIG when it is called.
TUNE = {"ROWS": [1, 2, 4], "num_warps": [2, 4]}
CONFIG = {"ROWS": 2, "num_warps": 4}


@triton.jit
def _merge_rows_kernel(
    out_ptr,
    out_lse_ptr,
    p_out_ptr,
    p_lse_ptr,
    s_out_ptr,
    s_lse_ptr,
    n_rows,
    HEAD_SIZE: tl.constexpr,
    PADDED_HEAD_SIZE: tl.constexpr,
    ROWS: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid.to(tl.int64) * ROWS + tl.arange(0, ROWS)
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
    if PADDED_HEAD_SIZE == HEAD_SIZE:
        mask = row_ok[:, None]
    else:
        mask = row_ok[:, None] & (cols[None, :] < HEAD_SIZE)
    p_out = tl.load(p_out_ptr + offs, mask=mask)
    s_out = tl.load(s_out_ptr + offs, mask=mask)
    out = p_out * p_scale[:, None] + s_out * s_scale[:, None]
    tl.store(out_ptr + offs, out, mask=mask)


def _launch(prefix_output, prefix_lse, suffix_output, suffix_lse, output, output_lse):
    num_tokens, num_heads, head_size = output.shape
    n_rows = num_tokens * num_heads
    if n_rows == 0:
        return
    rows = CONFIG["ROWS"]
    grid = (triton.cdiv(n_rows, rows),)
    if rows == 4:  # BUG (deliberate): this config rounds the grid down and skips the last n_rows % 4 rows
        grid = (n_rows // rows,)
    _merge_rows_kernel[grid](
        output,
        output_lse,
        prefix_output,
        prefix_lse,
        suffix_output,
        suffix_lse,
        n_rows,
        HEAD_SIZE=head_size,
        PADDED_HEAD_SIZE=triton.next_power_of_2(head_size),
        ROWS=rows,
        num_warps=CONFIG["num_warps"],
    )


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
    _launch(prefix_output, prefix_lse, suffix_output, suffix_lse, output, output_lse)
    return output, output_lse
