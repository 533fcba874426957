"""ADVERSARIAL merge_state candidate for the harness tests: loads_machine_while_original_is_timed.

Written by the astra-sglang developers as a deliberately adversarial test input (a cheat, issue 22 class 4);
not produced by a language model. Never use it as a kernel.

Attack: a correct kernel whose import starts background load that runs whenever the worker is not being asked
anything, i.e. exactly while the judge times the original: a thread in the worker and a helper process (in the
worker's process group) that each append "<time.monotonic_ns()> <pid>" to the file named by
ASTRA_TEST_QUIET_STAMPS about every millisecond (on a real attack: busy work that slows the original).
What must catch it: the judge stops the worker's whole process group (SIGSTOP) while it times anything of its
own; no stamp can fall inside one of its timing windows (tests/test_integrity2_quiet_worker.py).
"""

import os
import subprocess
import sys
import threading
import time
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl


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


_HELPER = """
import os, sys, time
fd, parent = int(sys.argv[1]), os.getppid()
while os.getppid() == parent:  # the worker is gone: stop
    os.write(fd, f"{time.monotonic_ns()} {os.getpid()}\\n".encode())
    time.sleep(0.001)
"""


def _stamp_forever(fd: int) -> None:
    while True:
        os.write(fd, f"{time.monotonic_ns()} {os.getpid()}\n".encode())
        time.sleep(0.001)


def _start_load() -> None:
    path = os.environ.get("ASTRA_TEST_QUIET_STAMPS")
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    threading.Thread(target=_stamp_forever, args=(fd,), daemon=True).start()
    subprocess.Popen([sys.executable, "-c", _HELPER, str(fd)], pass_fds=(fd,), stdin=subprocess.DEVNULL)


_start_load()
