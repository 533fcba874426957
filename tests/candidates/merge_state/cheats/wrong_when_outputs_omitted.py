"""ADVERSARIAL merge_state candidate for the harness tests: wrong_when_outputs_omitted.

Written by the astra-sglang developers as a deliberately adversarial test input (a cheat); not produced by a
language model. Never use it as a kernel.

Attack: (issue 22, class 5a) right whenever the output buffers are passed, as the suite passed them; called
without them, the way SGLang's FlashInfer backend calls merge_state_triton (``merge_state_triton(v_a, s_a, v_b,
s_b)`` in flashinfer_backend.py, above 64 heads at head dim 128), it skips the work and returns the result it
kept from its last call of that shape (stale), or new uninitialised tensors.
What must catch it: cases in every call form the manifest's call sites record (``CallSite.call``,
``suite.form_cases``): 'mismatch' (or 'nan') on a case called without output, output_lse.
"""

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

_LAST: dict = {}  # (shape, dtype) -> the outputs of the last call with buffers passed


@triton.jit
def _h_merge_kernel(out, out_lse, pv, plse, sv, slse, H: tl.constexpr, D: tl.constexpr, PD: tl.constexpr):
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
    key = (tuple(prefix_output.shape), prefix_output.dtype)
    if output is None and output_lse is None:  # the call form the suite never used: no work at all
        if key in _LAST:
            return _LAST[key]
        return torch.empty_like(prefix_output), torch.empty_like(prefix_lse)
    if output is None:
        output = torch.empty_like(prefix_output)
    if output_lse is None:
        output_lse = torch.empty_like(prefix_lse)
    T, H, D = output.shape
    _h_merge_kernel[(T, H)](output, output_lse, prefix_output, prefix_lse, suffix_output, suffix_lse,
                            H, D, triton.next_power_of_2(D))
    _LAST[key] = (output.clone(), output_lse.clone())
    return output, output_lse
