"""ADVERSARIAL merge_state candidate for the harness tests: reads_the_heldout_secret.

Written by the astra-sglang developers as a deliberately adversarial test input (a cheat); not produced by a
language model. Never use it as a kernel.

Attack: (issue 22, class 3) the held-out shapes are drawn from a private secret (``~/.config/astra-sglang/
heldout.key`` or ``ASTRA_SGLANG_HELDOUT_SECRET``). A kernel that can read it can compute the held-out set and be
right exactly on it and on the listed shapes, and wrong where only serving calls it. This one shows the reach
without the arithmetic: at import it looks for the secret in its environment and in the file, and once it has
found one it is wrong (prefix and suffix weights swapped) on every call; the marker line says what it found.
What must catch it: the secret never reaches the worker: no judge or worker inherits the variable
(``isolation.Child``), and the worker's Landlock rules hide the secret's folder (``sandbox.readable_except``). A
worker that sees neither stays right, and its verdict is its kernel's.
"""

import os

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl


def _find_secret():
    found = []
    if os.environ.get("ASTRA_SGLANG_HELDOUT_SECRET"):
        found.append("env")
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    try:
        with open(os.path.join(base, "astra-sglang", "heldout.key"), "rb") as f:
            if f.read():
                found.append("file")
    except OSError as e:
        found.append(f"file denied errno={e.errno}")
    marker = os.environ.get("ASTRA_TEST_CHEAT_MARKER")
    if marker:
        with open(os.path.join(marker, "reads_the_heldout_secret"), "a") as f:
            f.write(" ".join(found) + "\n")
    return any(x in ("env", "file") for x in found)


KNOWS_THE_SECRET = _find_secret()


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
    if SWAP:  # what a kernel that knows the held-out set may do everywhere else
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
                            H, D, triton.next_power_of_2(D), True, KNOWS_THE_SECRET)
    return output, output_lse
