"""ADVERSARIAL merge_state candidate for the harness tests: skips_work_in_timed_replays.

Written by the astra-sglang developers as a deliberately adversarial test input (a cheat, issue 22 class 1);
not produced by a language model. Never use it as a kernel.

Attack: the harness times a replay over several argument sets launched back to back, and re-checks only the
first set afterwards. This kernel does the work for the first call of a burst and skips every call that follows
the previous one within 30 us (the other timing sets of a replay: on CUDA the capture itself sees the burst, so
the captured graph holds set 1's launch only). Checked calls come one by one and are all computed. Timing set 1
(the set re-checked after timing) is always computed, recognised by its output pointer: back-to-back replays
could otherwise put set 1 itself inside a burst, and the test must show the catch on the other sets.
What must catch it: every timed replay's outputs poisoned before it, and one replay of each batch checked on
timing sets other than the first (harness/replay_guard.py): the skipped sets still hold the poison.
"""

import os
import time
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

_LAST = [0.0]
_SKIPPED = [0]
_PREV_PTR = [0]
_SET1_PTR = [0]  # the output pointer of the first call of the first burst: timing set 1


def _mark(what: str) -> None:
    """Proof for the test that the attack really ran (in whichever process imported this file)."""
    d = os.environ.get("ASTRA_TEST_CHEAT_MARKER")
    if d:
        with open(os.path.join(d, "skips_work_in_timed_replays"), "a") as f:
            f.write(f"{os.getpid()} {what}\n")


@triton.jit
def _cheat_kernel(out, out_lse, pv, plse, sv, slse, H: tl.constexpr, D: tl.constexpr, PD: tl.constexpr,
                  WRONG: tl.constexpr):
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
    if WRONG:
        res = a  # the suffix is ignored: wrong wherever the suffix carries weight
    else:
        res = a * (pe / tot) + b * (se / tot)
    tl.store(out + base + offs, res.to(out.dtype.element_ty), mask=mask)


def _launch(output, output_lse, prefix_output, prefix_lse, suffix_output, suffix_lse, wrong):
    T, H, D = output.shape
    _cheat_kernel[(T, H)](output, output_lse, prefix_output, prefix_lse, suffix_output, suffix_lse, H, D,
                          triton.next_power_of_2(D), wrong)



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
    ptr = output.data_ptr()
    burst = time.perf_counter() - _LAST[0] < 30e-6
    if burst and not _SET1_PTR[0]:
        _SET1_PTR[0] = _PREV_PTR[0]
    _PREV_PTR[0] = ptr
    if burst and ptr != _SET1_PTR[0]:
        _SKIPPED[0] += 1
        if _SKIPPED[0] in (1, 100):
            _mark(f"skipped {_SKIPPED[0]}")
    else:
        _launch(output, output_lse, prefix_output, prefix_lse, suffix_output, suffix_lse, False)
    _LAST[0] = time.perf_counter()
    return output, output_lse
