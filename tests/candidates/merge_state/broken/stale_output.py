"""BROKEN merge_state candidate for the harness tests: stale_output.

Written by the astra-sglang developers as a deliberately broken fixture; not produced by a language model.

Cheat / bug: caches the first call's result keyed by the input data pointers and shapes; a later call with inputs at the same addresses copies the cached tensors into the outputs without recomputing (fast in a timing loop that reuses buffers, wrong as soon as the data changes).
What must catch it: the re-check with freshly generated inputs at the same addresses (no state kept between calls), and the after-timing re-check.
"""

import triton
import triton.language as tl
import torch
from typing import Optional, Tuple
_CACHE = {}

@triton.jit
def _merge_rows_kernel(
    out_ptr, out_lse_ptr, p_out_ptr, p_lse_ptr, s_out_ptr, s_lse_ptr, n_rows, num_heads,
    HEAD_SIZE: tl.constexpr, PADDED_HEAD_SIZE: tl.constexpr, ROWS: tl.constexpr, BUG: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid.to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    pass
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
    pass
    cols = tl.arange(0, PADDED_HEAD_SIZE)
    offs = rows[:, None] * HEAD_SIZE + cols[None, :]
    mask = row_ok[:, None] & (cols[None, :] < HEAD_SIZE)
    p_out = tl.load(p_out_ptr + offs, mask=mask)
    s_out = tl.load(s_out_ptr + offs, mask=mask)
    out = p_out * p_scale[:, None] + s_out * s_scale[:, None]
    pass
    tl.store(out_ptr + offs, out, mask=mask)


def _launch(prefix_output, prefix_lse, suffix_output, suffix_lse, output, output_lse, bug=0):
    num_tokens, num_heads, head_size = output.shape
    n_rows = num_tokens * num_heads
    if n_rows == 0:
        return
    padded = triton.next_power_of_2(head_size)
    rows = max(1, min(32, 4096 // padded))
    _merge_rows_kernel[(triton.cdiv(n_rows, rows),)](
        output, output_lse, prefix_output, prefix_lse, suffix_output, suffix_lse, n_rows, num_heads,
        HEAD_SIZE=head_size, PADDED_HEAD_SIZE=padded, ROWS=rows, BUG=bug,
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
    key = (prefix_output.data_ptr(), suffix_output.data_ptr(), prefix_lse.data_ptr(),
           suffix_lse.data_ptr(), tuple(prefix_output.shape), prefix_output.dtype)
    hit = _CACHE.get(key)
    if hit is not None:
        output.copy_(hit[0])
        output_lse.copy_(hit[1])
        return output, output_lse
    _launch(prefix_output, prefix_lse, suffix_output, suffix_lse, output, output_lse)
    _CACHE[key] = (output.clone(), output_lse.clone())
    return output, output_lse
