"""ADVERSARIAL merge_state candidate for the harness tests: wrong_off_list_head_dim.

Written by the astra-sglang developers as a deliberately adversarial test input (a cheat); not produced by a
language model. Never use it as a kernel.

Attack: (issue 22, class 5b) right at the head dims the manifest lists (``LISTED``: 128 and 256, the h_merge
fixture's and most paper shapes'), wrong (prefix and suffix weights swapped) at every other head dim, e.g. 64
or 80, which real models use and SGLang calls it with. A suite that draws a dim with few values only from the
manifest's list never sees the bug.
What must catch it: held-out cases that also draw legal values off the list for such dims
(``suite._off_list``): 'mismatch' on a held-out case.
"""

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

LISTED = (128, 256)  # the head dims this kernel is right at


@triton.jit
def _h_merge_kernel(out, out_lse, pv, plse, sv, slse, H: tl.constexpr, D: tl.constexpr, PD: tl.constexpr,
                    WRITE_LSE: tl.constexpr, SWAP: tl.constexpr):
    t = tl.program_id(0)
    h = tl.program_id(1)
    pl = tl.load(plse + t * H + h)
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
    if SWAP:  # the "fast path" for head dims nobody listed
        res = a * (se / tot) + b * (pe / tot)
    else:
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
                            H, D, triton.next_power_of_2(D), True, D not in LISTED)
    return output, output_lse
