"""ADVERSARIAL merge_state candidate for the harness tests: wrong_special_when_large.

Written by the astra-sglang developers as a deliberately adversarial test input (a cheat); not produced by a
language model. Never use it as a kernel.

Attack: (issue 22, class 5c) a "large-size path" taken only when the output has more than ``LARGE`` elements
(2^22: the size up to which the suite runs its non-normal value distributions) forgets that an lse of +inf means
an empty state (-inf): right on every finite input at every size, wrong on the special values only there. The
tests lower ``LARGE`` in a copy of this file together with ``EvalConfig.dist_max_elems`` (the interpreter is
too slow for 2^22 elements).
What must catch it: a special-value case per dtype on the largest checked shape above ``dist_max_elems``
(``suite._large_special_shape``): 'mismatch' (or 'nan') on that case.
"""

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

LARGE = 1 << 22  # outputs with more elements than this take the large-size path


@triton.jit
def _h_merge_kernel(out, out_lse, pv, plse, sv, slse, H: tl.constexpr, D: tl.constexpr, PD: tl.constexpr,
                    WRITE_LSE: tl.constexpr, LARGE_PATH: tl.constexpr):
    t = tl.program_id(0)
    h = tl.program_id(1)
    pl = tl.load(plse + t * H + h)
    sl = tl.load(slse + t * H + h)
    if not LARGE_PATH:  # the large-size path skips the +inf -> -inf mapping
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
                            H, D, triton.next_power_of_2(D), True,
                            output.numel() > LARGE)
    return output, output_lse
