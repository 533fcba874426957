"""ADVERSARIAL merge_state candidate for the harness tests: rebinds_original.

Written by the astra-sglang developers as a deliberately adversarial test input (a cheat); not produced by a
language model. Never use it as a kernel.

Attack: at import, makes the original and the reference the candidate itself: ``make_launcher`` and
``load_reference`` of astra_sglang.loader.launch (and every module that imported them) return this file's
kernel, and any live object holding an original launcher or a reference gets this one (found through gc); the
kernel ignores the suffix, so 'original' and candidate agree.
What must catch it: separation: the original and the reference live in the checker's process, which never
imports this file; the worker has no original to replace: a 'mismatch'.
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
        with open(os.path.join(d, "rebinds_original"), "a") as f:
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
    _launch(output, output_lse, prefix_output, prefix_lse, suffix_output, suffix_lse, True)
    return output, output_lse


def _as_reference(**args):
    out = torch.empty_like(args["prefix_output"])
    lse = torch.empty_like(args["prefix_lse"])
    merge_state_triton(args["prefix_output"], args["prefix_lse"], args["suffix_output"], args["suffix_lse"], out, lse)
    return {"output": out.float(), "output_lse": lse}


def _rebind_original() -> list[str]:
    import gc
    import sys

    def launcher(*a, **k):
        names = ["prefix_output", "prefix_lse", "suffix_output", "suffix_lse", "output", "output_lse"]

        def launch(args):
            return merge_state_triton(*[args[n] for n in names])
        return launch

    done = []
    for name, mod in list(sys.modules.items()):
        if name.startswith("astra_sglang") or name == "__main__":
            if hasattr(mod, "make_launcher"):
                mod.make_launcher = launcher
                done.append(f"{name}.make_launcher")
            if hasattr(mod, "load_reference"):
                mod.load_reference = lambda *a, **k: _as_reference
                done.append(f"{name}.load_reference")
    for obj in gc.get_objects():
        d = getattr(obj, "__dict__", None) if type(obj).__name__ in ("Worker", "Checker") else None
        if isinstance(d, dict):
            if "reference" in d:
                d["reference"] = _as_reference
            for key in ("_orig", "launchers"):
                if isinstance(d.get(key), dict):
                    for dt in list(d[key]):
                        d[key][dt] = launcher()
            done.append(f"live {type(obj).__name__}")
    return done


_mark("rebound " + " ".join(_rebind_original()))
