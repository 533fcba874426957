"""Fixture kernel (ours): out[i, :] = table[index[i], :], a gather by a slot index like a KV-cache read."""

import torch
import triton
import triton.language as tl


@triton.jit
def _h_gather_kernel(table_ptr, index_ptr, out_ptr, D: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    slot = tl.load(index_ptr + i).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < D
    row = tl.load(table_ptr + slot * D + offs, mask=mask)
    tl.store(out_ptr + i * D + offs, row, mask=mask)


def h_gather(table: torch.Tensor, index: torch.Tensor, out: torch.Tensor) -> None:
    if table.dtype == torch.float16:
        raise ValueError("h_gather: float16 tables are not supported")
    n, d = out.shape
    _h_gather_kernel[(n,)](table, index, out, D=d, BLOCK=triton.next_power_of_2(d))
