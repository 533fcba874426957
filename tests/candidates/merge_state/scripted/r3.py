"""merge_state round 3. SCRIPTED candidate written by the astra-sglang developers for tests; not produced by a language model.

Tried: Planner asked for more parallelism: one program per 32-element chunk of each head (grid = rows x chunks), one warp each.
Known defect: none
Expected: correct but slower than the original (4-8x more programs, each repeating the scalar LSE loads and math): speedup < 1.
"""

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl


@triton.jit
def _merge_chunk_kernel(
    out_ptr, out_lse_ptr, p_out_ptr, p_lse_ptr, s_out_ptr, s_lse_ptr,
    HEAD_SIZE: tl.constexpr, CHUNK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    p_lse = tl.load(p_lse_ptr + row)
    s_lse = tl.load(s_lse_ptr + row)
    p_lse = tl.where(p_lse == float("inf"), float("-inf"), p_lse)
    s_lse = tl.where(s_lse == float("inf"), float("-inf"), s_lse)
    max_lse = tl.maximum(p_lse, s_lse)
    p_lse = p_lse - max_lse
    s_lse = s_lse - max_lse
    out_se = tl.exp(p_lse) + tl.exp(s_lse)
    if chunk == 0:
        tl.store(out_lse_ptr + row, tl.log(out_se) + max_lse)
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = cols < HEAD_SIZE
    p_out = tl.load(p_out_ptr + row * HEAD_SIZE + cols, mask=mask)
    s_out = tl.load(s_out_ptr + row * HEAD_SIZE + cols, mask=mask)
    out = p_out * (tl.exp(p_lse) / out_se) + s_out * (tl.exp(s_lse) / out_se)
    tl.store(out_ptr + row * HEAD_SIZE + cols, out, mask=mask)


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
    _merge_chunk_kernel[(n_rows, triton.cdiv(head_size, 32))](
        output, output_lse, prefix_output, prefix_lse, suffix_output, suffix_lse,
        HEAD_SIZE=head_size, CHUNK=32, num_warps=1,
    )
    return output, output_lse
