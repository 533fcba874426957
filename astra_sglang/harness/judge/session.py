"""What the judge's three parts share for one candidate: the job, the worker's channel, the original and the reference.

A ``JudgeSession`` asks the candidate's worker one thing at a time (``ask``: death, silence or a malformed reply
is the candidate's verdict), runs the original and the reference on the same values, and compares (``check``).
``correctness.Correctness``, ``timed.ShapeTimer`` and ``baselines.Baselines`` decide with it.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from astra_sglang.checker import (
    Mismatch,
    compare,
    scale_key,
    segments_key,
)
from astra_sglang.contract.op import (
    Tolerance,
    signature_names,
)
from astra_sglang.contract.result import FailedCase
from astra_sglang.errors import AstraError
from astra_sglang.harness.shared import sandbox, timing
from astra_sglang.harness.shared.arena import Arena
from astra_sglang.harness.shared.isolation import Child, ChildDied, GpuWatch, crash_lines
from astra_sglang.harness.shared.protocol import (
    CUDA_STICKY,
    CaseSpec,
    CheckJob,
    Hello,
    Ping,
    Progress,
    ProtocolError,
    Reply,
    Request,
    Returned,
    failed_case,
)
from astra_sglang.harness.shared.suite import shape_of, with_call
from astra_sglang.harness.shared.tensors import ArgSet, torch_dtype
from astra_sglang.loader.launch import compile_call, load_inputs, load_reference, make_launcher

if TYPE_CHECKING:
    from astra_sglang.harness.judge.baselines import Baselines
    from astra_sglang.harness.judge.correctness import Correctness
    from astra_sglang.harness.judge.timed import ShapeTimer

Launcher = Callable[[dict[str, Any]], Any]
# NVML watch of the stopped worker's queued GPU work: opt-in (written 2026-12-03). A false "suspect" would make
# every honest candidate "never a win", and its wait costs a sample period per batch; tests/test_integrity2_quiet_
# worker.py's gpu test turns it on. First run on a GPU (the H100 device, 2026-12-07): NVML there lists no compute
# process at all, so the watch says it is blind (GpuWatch.open) and the flood was caught by the wall-clock check.
NVML_WATCH_ENV = "ASTRA_SGLANG_NVML_WATCH"


class CaseFailure(Exception):
    def __init__(self, failure: FailedCase, sticky: bool = False):
        super().__init__(failure.detail)
        self.failure = failure
        self.sticky = sticky


class Skip(Exception):
    """The original itself refuses this case (e.g. a width its kernel does not support)."""


#: launch errors that leave the context usable: the kernel refused this shape's launch configuration
LAUNCH_REFUSED = ("invalid argument", "invalid configuration argument", "too many resources requested")


def poisons_context(error: BaseException | str) -> bool:
    """Whether a launch error leaves the CUDA context unusable (an illegal address, a device assert), as against a
    launch the kernel refused for this shape's configuration (``LAUNCH_REFUSED``), after which work goes on."""
    text = str(error)
    return any(m in text for m in CUDA_STICKY) and not any(m in text for m in LAUNCH_REFUSED)


def collect_launch_error(device: str) -> str | None:
    """Read (and so clear) CUDA's last-error flag where a refused launch left it; its text, or None.

    A launch refused for its configuration returns the error and also records it as the runtime's last error,
    which stays until someone reads it; the next torch kernel launch does, and raises. FlashInfer's MergeState
    returns the status (above 64 heads at head dim 128 it asks for more than 1024 threads a block), our glue turns
    it into an exception, and nothing read the flag: merge_state's original then died at 128 heads inside the
    next eager torch op of its own timing (replay_guard's window copy), on the H100 four times, 2026-12-05..07.
    A torch launch here reads it where it belongs. An error that poisons the context is raised."""
    if device != "cuda":
        return None
    try:
        torch.zeros(1, device=device).add_(1)
        torch.cuda.synchronize()
        return None
    except Exception as e:  # noqa: BLE001 - a refusal is returned; anything else poisons the context
        if poisons_context(e):
            raise
        return str(e)


class JudgeSession:
    def __init__(self, job: CheckJob, progress: Callable[[Progress], None], worker: Child | None,
                 arena: Arena | None, start_worker: Callable[[], Child] | None = None):
        self.job = job
        self.progress = progress
        self.manifest = job.manifest
        self.op_dir = Path(job.op_dir)
        self.device = job.device
        self.cfg = job.config
        self.worker = worker
        self.start_worker = start_worker
        self.arena = arena
        self.candidate = job.candidate
        self.timed = self.device == "cuda" or self.cfg.simulate_timing
        self.clock = timing.clock_for(self.device)
        self._orig: dict[tuple[str, tuple[str, ...] | None], Launcher] = {}
        self.reference = load_reference(self.op_dir, self.manifest)
        self.op_inputs = load_inputs(self.op_dir, self.manifest)
        self._passings: dict[tuple[str, ...] | None, tuple[set[str], list[str]]] = {}
        self.by_value = self.passing(None)[1]
        tensors = self.manifest.signature.tensors
        self.compared = [t.name for t in tensors if t.role in ("output", "inplace")]
        self.inputs = [t.name for t in tensors if t.role == "input"]
        self.notes: list[str] = []
        self.deadline = time.monotonic() + max(1.0, self.cfg.max_wall_s - 30.0)
        # per worker: the channel's round trip and NVML's watch of its process (reset with a fresh worker)
        self._latency_us: float | None = None
        self._gpu_watch: GpuWatch | None = None
        self._gpu_watched = False  # GpuWatch.open tried (once per worker)
        self._hello_read = False  # the worker's Hello (its sandbox) read, once per worker, before its first request
        self.sandbox: str | None = None  # the first worker's sandbox level (a later worker's differing one: a note)
        # a sweep only chooses a config; its frozen source is then evaluated in full with every defence, so a
        # sweep's timing skips the per-shape costs that only protect a claim (sweep_checks.py says which)
        self.screening = False
        # the three parts of the verdict, attached by Checker (each holds this session)
        self.baselines: Baselines
        self.correctness: Correctness
        self.timer: ShapeTimer

    def new_worker(self, start: Callable[[], Child]) -> None:
        """Replace the worker (its whole process group killed) by a fresh one from ``start``; what was learnt of
        the old one (its channel's round trip, NVML's watch of its pid) goes with it."""
        if self.worker is not None:
            self.worker.close()
        self.worker = start()
        self._latency_us = None
        self._gpu_watched, self._gpu_watch = False, None
        self._hello_read = False

    def passing(self, call: list[str] | None) -> tuple[set[str], list[str]]:
        """For the recipe's call (None) or a recorded call form: the tensors passed, and the outputs not passed
        (returned by value, in signature order). Worked out once per form: every case of the form asks again."""
        key = tuple(call) if call is not None else None
        if key not in self._passings:
            names = compile_call(call if call is not None else self.manifest.recipe.call,
                                 signature_names(self.manifest)).names()
            tensors = self.manifest.signature.tensors
            self._passings[key] = ({t.name for t in tensors if t.name in names},
                                   [t.name for t in tensors if t.role == "output" and t.name not in names])
        return self._passings[key]

    def form(self, case: CaseSpec) -> str:
        """How a case calls the entry point, for a failure's label: '' for the recipe's call."""
        if case.call is None:
            return ""
        left_out = sorted(self.passing(None)[0] - self.passing(case.call)[0])
        return f" [called as SGLang's call site does: without {', '.join(left_out)}, using what it returns]"

    def ask(self, req: Any, case: CaseSpec | None, label: str) -> tuple[Reply, list[torch.Tensor]]:
        """One request; its reply and any tensors returned by value. Death, silence or a malformed reply is
        the candidate's verdict."""
        assert self.worker is not None
        try:
            if not self._hello_read:
                self._hello_read = True
                self._sandbox_seen(self.worker.recv(Hello, self.cfg.timeout_s, self.deadline).sandbox)
            self.worker.send(Request(req=req))
            reply = self.worker.recv(Reply, self.cfg.timeout_s, self.deadline)
            frames = []
            for item in reply.returned.items if reply.returned else []:
                if item.kind == "tensor":
                    frames.append(self._frame(item, case))
        except ChildDied as d:
            tail = crash_lines(self.worker.log_tail(), self.candidate)
            detail = f"{d.detail} during {label}" + (("; worker output: " + " | ".join(tail)) if tail else "")
            raise CaseFailure(self.case_failure(case, d.kind, detail[:3000])) from None
        except ProtocolError as e:
            raise CaseFailure(self.case_failure(case, "protocol violation", f"{label}: {e}")) from None
        return reply, frames

    def _sandbox_seen(self, level: str) -> None:
        """Record the sandbox a worker reported before it imported the candidate (``sandbox.install``), checked
        where the kernel can say: a worker claiming seccomp must show a filter in ``/proc/<pid>/status``."""
        assert self.worker is not None
        pid = self.worker.proc.pid
        mode, caps = sandbox.seccomp_mode(pid), sandbox.capabilities(pid)
        layers = level.split(":")[0]
        if "seccomp" in layers:
            if mode is not None and mode != 2:
                level = f"none: the worker reported {level!r} but the kernel shows seccomp mode {mode}"
            elif caps and "capabilities kept" not in level:
                level += f"; but the kernel shows capabilities {caps:#x} (CapEff)"
        if "mounts" in layers and (left := sandbox.left_writable(pid, {**os.environ, **self.worker.env_extra})):
            level = f"none: the worker reported {level!r} but can write through {', '.join(left[:4])}"
        elif "mounts" in layers and "landlock" not in layers and sandbox.secret_visible(pid):
            level += "; but the held-out secret's folder is not hidden from it"
        if self.sandbox is None:
            self.sandbox = level
        elif level != self.sandbox and len(self.notes) < 20:
            self.notes.append(f"a fresh worker reported another sandbox: {level}")

    def _frame(self, item: Returned, case: CaseSpec | None) -> torch.Tensor:
        """A tensor returned by value, read only up to the largest tensor the signature declares for the case."""
        assert self.worker is not None
        declared = [math.prod(shape_of(t.shape, case.dims)) for t in self.manifest.signature.tensors] if case else []
        try:
            dt = torch_dtype(item.dtype or "")
        except ValueError as e:
            raise ProtocolError(str(e)) from None
        elem = torch.empty((), dtype=dt).element_size()
        if item.nbytes != math.prod(item.shape) * elem or item.nbytes > max(declared, default=0) * 8:
            raise ProtocolError(f"returned tensor of {item.nbytes} bytes for shape {item.shape} {item.dtype}")
        raw = self.worker.recv_bytes(self.cfg.timeout_s, self.deadline, maxlength=max(item.nbytes, 1))
        if len(raw) != item.nbytes:
            raise ProtocolError("returned tensor bytes do not match the reply")
        if not raw:
            return torch.empty(item.shape, dtype=dt, device=self.device)
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dt).reshape(item.shape).to(self.device)

    def case_failure(self, case: CaseSpec | None, reason: str, detail: str,
                     tensor: str | None = None, m: Mismatch | None = None) -> FailedCase:
        if case is None:
            return FailedCase(reason=reason, detail=detail, tensor=tensor)
        return failed_case(case, reason, detail, tensor, m.max_abs_err if m else None, m.max_rel_err if m else None)

    def fail(self, case: CaseSpec, reason: str, detail: str, tensor: str | None = None,
             m: Mismatch | None = None) -> CaseFailure:
        return CaseFailure(self.case_failure(case, reason, detail, tensor, m))

    def tampered(self, tampered: list[str], when: str) -> None:
        if tampered:
            raise CaseFailure(FailedCase(reason="clock tampered", detail=f"{when}, the candidate's process had "
                                         f"rebound: {', '.join(tampered[:8])}"))

    def orig_launcher(self, dtype: str, call: list[str] | None = None) -> Launcher:
        key = (dtype, tuple(call) if call is not None else None)
        if key not in self._orig:
            kw: dict[str, Any] = {}
            if self.manifest.source_kind == "cuda_jit":
                kw = dict(cache_dir=self.cfg.cache_dir, arch=self.cfg.arch)
            self._orig[key] = make_launcher(self.op_dir, with_call(self.manifest, call), dtype, **kw)
        return self._orig[key]

    def outs(self, ret: Any, a: ArgSet, call: list[str] | None = None) -> dict[str, torch.Tensor]:
        """The original's outputs: the buffers, plus outputs it returns by value (in order; in a call form that
        leaves outputs out, by ``Signature.returns``)."""
        by_value = self.passing(call)[1]
        outs = {n: a.tensors[n].view for n in self.compared if n not in by_value}
        if by_value:
            seq = list(ret) if isinstance(ret, (tuple, list)) else [ret]
            returns = self.manifest.signature.returns
            got = dict(zip(returns if call is not None and returns else by_value, seq))
            missing = [n for n in by_value if n not in got]
            if missing:
                raise AstraError(f"{self.manifest.short_name}: the original called as {call} returns no {missing}")
            outs.update((n, got[n]) for n in by_value)
        return outs

    def reference_outs(self, case: CaseSpec, vals: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        a = ArgSet(self.manifest, case.dims, case.dtype, self.device, self.op_inputs)
        a.fill(case.distribution, None, vals)  # type: ignore[arg-type]
        return self.reference(**a.args())

    def values(self, case: CaseSpec, seed: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator(device=self.device).manual_seed(seed)
        a = ArgSet(self.manifest, case.dims, case.dtype, self.device, self.op_inputs)
        a.fill(case.distribution, gen)
        return a.values()

    def check(self, case: CaseSpec, outs: dict[str, torch.Tensor], orig: dict[str, torch.Tensor],
              ref: dict[str, torch.Tensor]) -> tuple[str, Mismatch] | None:
        tol = self.manifest.tolerances[case.dtype]
        if case.distribution == "tiny":  # values ~1e-3: an absolute tolerance made for values ~1 would accept 0
            tol = Tolerance(atol=tol.atol * 1e-3, rtol=tol.rtol)
        for name in self.compared:
            m = compare(name, outs[name], orig[name], ref.get(name), tol, ref.get(scale_key(name)),
                        ref.get(segments_key(name)))
            if m is not None:
                return name, m
        return None

    def launch_error(self, case: CaseSpec, reply: Reply, label: str) -> CaseFailure:
        f = self.fail(case, "launch error", f"{label}: {reply.error[:2000]}")
        f.sticky = reply.sticky
        return f

    def latency(self) -> float:
        """The round trip of an empty request (max of a few), in us: the fixed part of every batch's wall."""
        if self._latency_us is None:
            worst = 0.0
            for _ in range(5):
                t0 = time.perf_counter()
                self.ask(Ping(), None, "ping")
                worst = max(worst, time.perf_counter() - t0)
            self._latency_us = 1.5e6 * worst + 200.0
        return self._latency_us

    def watch_gpu(self) -> GpuWatch | None:
        """NVML's view of the worker's GPU activity (CUDA only; opened once); without NVML a note says the
        worker's GPU queue is not watched while the original is timed."""
        if self.device != "cuda" or self.worker is None:
            return None
        if not self._gpu_watched:
            self._gpu_watched = True
            if os.environ.get(NVML_WATCH_ENV) != "1":
                self.notes.append(f"the worker is stopped while the original is timed; GPU work it queued before is "
                                  f"not watched ({NVML_WATCH_ENV}=1 watches it through NVML, not yet run on a GPU)")
                return None
            uuid = str(getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid", ""))
            self._gpu_watch, why = GpuWatch.open(self.worker.proc.pid, uuid) if uuid else (None, "no GPU uuid")
            if self._gpu_watch is None:
                self.notes.append(f"{why}: the worker is stopped while the original is timed, but GPU work it "
                                  "queued before is not watched (it may still run then; the wall-clock check of "
                                  "each timed batch still holds)")
        return self._gpu_watch

