"""BROKEN merge_state candidate for the harness tests (ours, hand-written; not from a language model).

Bug: its kernel loads from a wild pointer (2**44 elements past the input). Under TRITON_INTERPRET=1 that read
is a SIGSEGV of the worker; on a GPU, an illegal address. Expected verdict: crash (SIGSEGV) on CPU. (It uses
no forbidden module, so it reaches the worker past the static screen.)
"""

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl


@triton.jit
def _h_merge_kernel(out, out_lse, pv, plse, sv, slse, H: tl.constexpr, D: tl.constexpr, PD: tl.constexpr,
                    WRITE_LSE: tl.constexpr):
    t = tl.program_id(0)
    h = tl.program_id(1)
    pl = tl.load(plse + t * H + h + (1 << 44))
    sl = tl.load(slse + t * H + h)
    pl = tl.where(pl == float("inf"), float("-inf"), pl)
    sl = tl.where(sl == float("inf"), float("-inf"), sl)
    m = tl.maximum(pl, sl)
    pe = tl.exp(pl - m)
    se = tl.exp(sl - m)
    tot = pe + se
    if WRITE_LSE:
        tl.store(out_lse + t * H + h, tl.log(tot) + m)
    offs = tl.arange(0, PD)
    mask = offs < D
    base = (t * H + h) * D
    a = tl.load(pv + base + offs, mask=mask).to(tl.float32)
    b = tl.load(sv + base + offs, mask=mask).to(tl.float32)
    res = a * (pe / tot) + b * (se / tot)
    tl.store(out + base + offs, res.to(out.dtype.element_ty), mask=mask)


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
    T, H, D = output.shape
    _h_merge_kernel[(T, H)](output, output_lse, prefix_output, prefix_lse, suffix_output, suffix_lse,
                            H, D, triton.next_power_of_2(D), True)
    return output, output_lse
