"""ADVERSARIAL merge_state candidate for the harness tests: poisons_the_judges_files.

Written by the astra-sglang developers as a deliberately adversarial test input (issue 22 class 3); not produced
by a language model. Never use it as a kernel.

Attack: a correct kernel whose import rewrites files the judge reads after it: the op folder's original and
reference (the judge imports an original lazily, per dtype and call form, and every later evaluation imports
both again: a poisoned original makes any kernel look right or fast), a planted ``__pycache__`` entry, and a
file in the judge's Triton cache (on the GPU the judge loads the original's compiled kernel and its launcher
stub, a shared object, from there). Tried every way a same-user process can: write in place, truncate, replace
by a file written in its own temporary folder, a hard link into that folder, create a new file. The targets
come from ASTRA_TEST_POISON_TARGETS (os.pathsep-separated; a folder: plant a file in it); each attempt's outcome
goes to ASTRA_TEST_CHEAT_MARKER/poisons_the_judges_files, with the worker's TRITON_CACHE_DIR.
What must catch it: the worker's OS sandbox (Landlock, harness/shared/sandbox.py): it may write only its own
scratch folder (its own TMPDIR and Triton cache); every attempt fails with EACCES/EXDEV, the judge's files stay
as they were and the verdict is the kernel's own.
"""

import os
import tempfile
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl


def _mark(line: str) -> None:
    d = os.environ.get("ASTRA_TEST_CHEAT_MARKER")
    if d:
        with open(os.path.join(d, "poisons_the_judges_files"), "a") as f:
            f.write(line + "\n")


def _try(name: str, action) -> None:
    try:
        action()
        _mark(f"{name}: DONE")
    except OSError as e:
        _mark(f"{name}: denied {type(e).__name__} errno={e.errno}")


def _poison_file(path: str) -> None:
    _try(f"append {path}", lambda: open(path, "a").write("\nraise SystemExit('poisoned by the candidate')\n"))
    _try(f"truncate {path}", lambda: os.truncate(path, 0))
    own = os.path.join(tempfile.gettempdir(), "replacement")
    with open(own, "w") as f:
        f.write("raise SystemExit('replaced by the candidate')\n")
    _try(f"replace {path}", lambda: os.replace(own, path))
    link = os.path.join(tempfile.gettempdir(), "hardlink")
    _try(f"hardlink {path}", lambda: os.link(path, link))
    if os.path.exists(link):
        _try(f"write through hardlink {path}", lambda: open(link, "a").write("# poisoned through a hard link\n"))


def _plant(folder: str) -> None:
    _try(f"plant {folder}", lambda: open(os.path.join(folder, "planted_by_candidate.py"), "w").write("x = 1\n"))
    cache = os.path.join(folder, "__pycache__")
    _try(f"mkdir {cache}", lambda: os.makedirs(cache, exist_ok=True))


def _attack() -> None:
    _mark(f"TRITON_CACHE_DIR={os.environ.get('TRITON_CACHE_DIR', '')}")
    for target in os.environ.get("ASTRA_TEST_POISON_TARGETS", "").split(os.pathsep):
        if os.path.isdir(target):
            _plant(target)
        elif os.path.isfile(target):
            _poison_file(target)
    _mark("done")


_attack()


@triton.jit
def _h_merge_kernel(out, out_lse, pv, plse, sv, slse, H: tl.constexpr, D: tl.constexpr, PD: tl.constexpr,
                    WRITE_LSE: tl.constexpr):
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
