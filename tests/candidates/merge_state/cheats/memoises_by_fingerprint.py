"""ADVERSARIAL merge_state candidate for the harness tests: memoises_by_fingerprint.

Written by the astra-sglang developers as a deliberately adversarial test input (a cheat, issue 22 class 2);
not produced by a language model. Never use it as a kernel.

Attack: every timed replay runs on the same inputs, so a kernel that fingerprints a few input elements (two per
input here) and, on a
match, copies the outputs it kept from an earlier call does no work while timed. Its outputs are right (the
inputs really are the same), so poisoned outputs and the check of one kept replay per batch both pass it; with
new values every checked call, the fingerprint never matches there. On a GPU the fingerprint would live in the
kernel (a few loads, then a copy of kept outputs); here it is host code, which is what the CPU test can run.
What must catch it: the kept replay's inputs perturbed, where the fingerprint does not look, from a seed the
judge chooses (harness/shared/replay_guard.py): the memo returns the outputs of the unperturbed inputs.
"""

import os
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

_MEMO: dict = {}
_HITS = [0]


def _mark(what: str) -> None:
    """Proof for the test that the attack really ran (in whichever process imported this file)."""
    d = os.environ.get("ASTRA_TEST_CHEAT_MARKER")
    if d:
        with open(os.path.join(d, "memoises_by_fingerprint"), "a") as f:
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



def _fingerprint(*tensors: torch.Tensor) -> tuple:
    """Two elements at the front of each input and the shapes: cheap, and blind to the rest."""
    return tuple((tuple(t.shape), tuple(t.reshape(-1)[:2].float().tolist())) for t in tensors)


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
    key = (output.data_ptr(), _fingerprint(prefix_output, prefix_lse, suffix_output, suffix_lse))
    kept = _MEMO.get(key)
    if kept is not None:
        output.copy_(kept[0])
        output_lse.copy_(kept[1])
        _HITS[0] += 1
        if _HITS[0] in (1, 100):
            _mark(f"memo hit {_HITS[0]}")
        return output, output_lse
    _launch(output, output_lse, prefix_output, prefix_lse, suffix_output, suffix_lse, False)
    _MEMO[key] = (output.clone(), output_lse.clone())
    return output, output_lse
