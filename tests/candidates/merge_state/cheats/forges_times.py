"""ADVERSARIAL merge_state candidate for the harness tests: forges_times.

Written by the astra-sglang developers as a deliberately adversarial test input (a cheat); not produced by a
language model. Never use it as a kernel.

Attack: a correct kernel launched twice (really 2x slower) that first disarms the tripwire
(``timing.tampered`` always answers 'nothing changed') and then makes both clocks' ``time_replays`` report a
tenth of what they measured: everything the worker says about time is forged, from inside its own process.
What must catch it: the checker's own wall clock: each timed batch must take about as long as the worker says
it did; far below it is 'suspect', never a win.
"""

import os
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl


def _mark(what: str) -> None:
    """Proof for the test that the attack really ran (in whichever process imported this file)."""
    d = os.environ.get("ASTRA_TEST_CHEAT_MARKER")
    if d:
        with open(os.path.join(d, "forges_times"), "a") as f:
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
    for _ in range(2):
        _launch(output, output_lse, prefix_output, prefix_lse, suffix_output, suffix_lse, False)
    return output, output_lse


def _forge_times() -> list[str]:
    import sys

    timing = sys.modules.get("astra_sglang.harness.shared.timing")
    if timing is None:
        return []
    timing.tampered = lambda: []
    for clock in (timing.CudaClock, timing.HostClock):
        real = clock.time_replays

        def forged(self, graph, replays, per_replay, *more, _real=real):
            return [u * 0.1 for u in _real(self, graph, replays, per_replay, *more)]
        clock.time_replays = forged
    return ["timing.tampered", "CudaClock.time_replays", "HostClock.time_replays"]


_mark("forged " + " ".join(_forge_times()))
