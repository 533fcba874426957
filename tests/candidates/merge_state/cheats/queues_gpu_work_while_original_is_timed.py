"""ADVERSARIAL merge_state candidate for the harness tests (GPU): queues_gpu_work_while_original_is_timed.

Written by the astra-sglang developers as a deliberately adversarial test input (a cheat, issue 22 class 4);
not produced by a language model. Never use it as a kernel.

Attack: a correct kernel whose import (where ASTRA_TEST_QUIET_GPU is set and CUDA is present) starts a thread
that keeps a side stream's queue several seconds deep in large matmuls. SIGSTOP stops the thread, not the GPU
work already queued: it runs beside the original the judge times.
What must catch it: the judge waits (bounded) for the worker's GPU activity to end before each batch of its own
and reads NVML's per-process samples after it; SM activity of the stopped worker = the shape is 'suspect'
(tests/test_integrity2_quiet_worker.py, gpu-marked). Without NVML a note says the queue is not watched.
"""

import os
import threading

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


def _flood() -> None:
    s = torch.cuda.Stream()
    a = torch.randn(16384, 16384, device="cuda", dtype=torch.bfloat16)
    with torch.cuda.stream(s):
        prev = None
        while True:
            for _ in range(600):  # ~12 ms each on an H200: several seconds queued
                torch.mm(a, a)
            ev = torch.cuda.Event()
            ev.record(s)
            if prev is not None:
                prev.synchronize()  # keep about two chunks in flight, never drain
            prev = ev


if os.environ.get("ASTRA_TEST_QUIET_GPU") and torch.cuda.is_available():
    threading.Thread(target=_flood, daemon=True).start()
