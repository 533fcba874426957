"""The verdict on one candidate, decided where no candidate code ever runs.

The checker process holds the original, the reference, the tolerances, the held-out cases and every
comparison; the candidate computes in its own worker (``worker.py``) and is asked one thing at a time over
the protocol. Per case the candidate runs first, on fresh guarded buffers with NaN-poisoned outputs, before
the original has computed that case; it runs again after, at new addresses; what it leaves in the arena is
copied out before it is looked at. Its return value is checked against the op contract. For timing the
original (and SGLang's library baseline) is timed here, the candidate there, in ABBA-interleaved batches;
each of the candidate's batches is held against the wall clock of this process, and the timed graph is
re-checked on new values afterwards. The worker's own tripwire (``timing.tampered``) is read after import
and after timing; a rebound primitive rejects the candidate.
"""

from __future__ import annotations

import math
import os
import random
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from astra_sglang.checker import (
    Mismatch,
    bits,
    compare,
    compare_to_reference,
    scale_key,
    segments_key,
    tolerance_used,
)
from astra_sglang.contract.op import (
    ORIGINAL,
    Baseline,
    CudaJitRecipe,
    Tolerance,
    served_baseline,
    signature_names,
    states_serving,
)
from astra_sglang.contract.result import CorrectnessReport, FailedCase, ShapeTiming
from astra_sglang.errors import AstraError
from astra_sglang.harness import timing
from astra_sglang.harness.arena import Arena, put, take
from astra_sglang.harness.isolation import STOP_WAIT_S, Child, ChildDied, GpuWatch, crash_lines
from astra_sglang.harness.protocol import (
    CUDA_STICKY,
    CaseSpec,
    CheckJob,
    CheckResult,
    Collect,
    Load,
    Ping,
    Prepare,
    Progress,
    ProtocolError,
    Recheck,
    Release,
    Reply,
    Request,
    Returned,
    ReturnValue,
    Run,
    Time,
    TimedShape,
    Verify,
    failed_case,
)
from astra_sglang.harness.protocol import (
    TIMING_BATCH as BATCH,
)
from astra_sglang.harness.replay_guard import ReplayGuard
from astra_sglang.harness.suite import shape_of, with_call
from astra_sglang.harness.tensors import ArgSet, torch_dtype
from astra_sglang.loader.launch import compile_call, load_inputs, load_reference, make_launcher

_SECRET = random.SystemRandom()  # which timed replay and set are checked: never derived from a seed the worker sees

Launcher = Callable[[dict[str, Any]], Any]
WALL_RATIO = 0.6  # a candidate batch reporting under this share of its wall time (less allowances) is suspect
WALL_BATCH_US = 50_000.0  # the wall-clock check times this long a batch (by the original's time) on each side
# Test hook: where set, the judge appends "<start_ns> <end_ns> <label>" (time.monotonic_ns, system-wide on Linux)
# for each window in which it timed something of its own with the worker stopped (tests/test_integrity2_quiet_worker.py).
DEBUG_WINDOWS_ENV = "ASTRA_SGLANG_DEBUG_WINDOWS"
# NVML watch of the stopped worker's queued GPU work: opt-in until it has run on a GPU (written 2026-12-03, never
# run there). A false "suspect" would make every honest candidate "never a win", and its wait costs a sample period
# per batch; tests/test_integrity2_quiet_worker.py's gpu test turns it on.
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


class Checker:
    def __init__(self, job: CheckJob, progress: Callable[[Progress], None], worker: Child | None,
                 arena: Arena | None, start_worker: Callable[[], Child] | None = None):
        """``start_worker`` starts a fresh worker for the candidate (the judge's): where given, a worker that died
        or hung on a case the original refuses is replaced and the case skipped (``_outside_domain``)."""
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
        self._served_fns: dict[tuple[str, str], Launcher] = {}
        self.reference = load_reference(self.op_dir, self.manifest)
        self.op_inputs = load_inputs(self.op_dir, self.manifest)
        self._passings: dict[tuple[str, ...] | None, tuple[set[str], list[str]]] = {}
        self.by_value = self._passing(None)[1]
        tensors = self.manifest.signature.tensors
        self.compared = [t.name for t in tensors if t.role in ("output", "inplace")]
        self.inputs = [t.name for t in tensors if t.role == "input"]
        self.notes: list[str] = []
        self.skipped = 0
        self.died_outside_domain = 0  # cases skipped where the worker died or hung and the original refuses too
        self._load_dtypes: list[str] = []
        self.reference_error: dict[str, tuple[float, float]] = {}
        self.deadline = time.monotonic() + max(1.0, self.cfg.max_wall_s - 30.0)
        self._latency_us: float | None = None
        self._gpu_watch: GpuWatch | None = None
        self._gpu_watched = False  # GpuWatch.open tried (once per worker)
        self._kept_check: tuple[CaseSpec, int] | None = None  # the shape being timed, its timing sets in use
        self._gpu_busy = 0  # the worker's highest SM % seen while this process timed the current shape
        self._unstopped = 0  # windows of the current shape in which the worker was not seen stopped (_quiet)
        # a sweep only chooses a config; its frozen source is then evaluated in full with every defence, so a
        # sweep's timing skips the per-shape costs that only protect a claim (sweep_checks.py says which)
        self.screening = False

    def _passing(self, call: list[str] | None) -> tuple[set[str], list[str]]:
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

    def _form(self, case: CaseSpec) -> str:
        """How a case calls the entry point, for a failure's label: '' for the recipe's call."""
        if case.call is None:
            return ""
        left_out = sorted(self._passing(None)[0] - self._passing(case.call)[0])
        return f" [called as SGLang's call site does: without {', '.join(left_out)}, using what it returns]"

    # -- the candidate's worker ------------------------------------------------------------------------------
    def _ask(self, req: Any, case: CaseSpec | None, label: str) -> tuple[Reply, list[torch.Tensor]]:
        """One request; its reply and any tensors returned by value. Death, silence or a malformed reply is
        the candidate's verdict."""
        assert self.worker is not None
        try:
            self.worker.send(Request(req=req))
            reply = self.worker.recv(Reply, self.cfg.timeout_s, self.deadline)
            frames = []
            for item in reply.returned.items if reply.returned else []:
                if item.kind == "tensor":
                    frames.append(self._frame(item, case))
        except ChildDied as d:
            tail = crash_lines(self.worker.log_tail(), self.candidate)
            detail = f"{d.detail} during {label}" + (("; worker output: " + " | ".join(tail)) if tail else "")
            raise CaseFailure(self._case_failure(case, d.kind, detail[:3000])) from None
        except ProtocolError as e:
            raise CaseFailure(self._case_failure(case, "protocol violation", f"{label}: {e}")) from None
        return reply, frames

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

    def _case_failure(self, case: CaseSpec | None, reason: str, detail: str,
                      tensor: str | None = None, m: Mismatch | None = None) -> FailedCase:
        if case is None:
            return FailedCase(reason=reason, detail=detail, tensor=tensor)
        return failed_case(case, reason, detail, tensor, m.max_abs_err if m else None, m.max_rel_err if m else None)

    def _fail(self, case: CaseSpec, reason: str, detail: str, tensor: str | None = None,
              m: Mismatch | None = None) -> CaseFailure:
        return CaseFailure(self._case_failure(case, reason, detail, tensor, m))

    def _tampered(self, tampered: list[str], when: str) -> None:
        if tampered:
            raise CaseFailure(FailedCase(reason="clock tampered", detail=f"{when}, the candidate's process had "
                                         f"rebound: {', '.join(tampered[:8])}"))

    # -- the original, the reference ---------------------------------------------------------------------
    def _orig_launcher(self, dtype: str, call: list[str] | None = None) -> Launcher:
        key = (dtype, tuple(call) if call is not None else None)
        if key not in self._orig:
            kw: dict[str, Any] = {}
            if self.manifest.source_kind == "cuda_jit":
                kw = dict(cache_dir=self.cfg.cache_dir, arch=self.cfg.arch)
            self._orig[key] = make_launcher(self.op_dir, with_call(self.manifest, call), dtype, **kw)
        return self._orig[key]

    def _outs(self, ret: Any, a: ArgSet, call: list[str] | None = None) -> dict[str, torch.Tensor]:
        """The original's outputs: the buffers, plus outputs it returns by value (in order; in a call form that
        leaves outputs out, by ``Signature.returns``)."""
        by_value = self._passing(call)[1]
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

    def _orig_run(self, case: CaseSpec, vals: dict[str, torch.Tensor],
                  served_fallback: bool = True) -> dict[str, torch.Tensor]:
        """The original's outputs; where it refuses the case, a candidate is held against the same-function
        kernel SGLang serves there (``_served_run``), else the case is skipped."""
        a = ArgSet(self.manifest, case.dims, case.dtype, self.device, self.op_inputs)
        a.fill(case.distribution, None, vals)  # type: ignore[arg-type]
        try:
            ret = self._orig_launcher(case.dtype, case.call)(a.args())
            self.clock.sync()
            outs = self._outs(ret, a, case.call)
        except AstraError:
            raise
        except Exception as e:  # noqa: BLE001
            if any(s in str(e) for s in CUDA_STICKY):
                raise
            # served kernels are called as the recipe calls the original: no stand-in for another call form
            served_fallback = served_fallback and case.call is None
            served = self._served_run(case, vals) if served_fallback and self.candidate is not None else None
            if served is not None:
                return served
            raise Skip(f"original refuses {case.dims} {case.dtype}: {str(e)[:300]}") from None
        return {n: t.clone() for n, t in outs.items()}

    def _reference(self, case: CaseSpec, vals: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        a = ArgSet(self.manifest, case.dims, case.dtype, self.device, self.op_inputs)
        a.fill(case.distribution, None, vals)  # type: ignore[arg-type]
        return self.reference(**a.args())

    def _values(self, case: CaseSpec, seed: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator(device=self.device).manual_seed(seed)
        a = ArgSet(self.manifest, case.dims, case.dtype, self.device, self.op_inputs)
        a.fill(case.distribution, gen)
        return a.values()

    def _check(self, case: CaseSpec, outs: dict[str, torch.Tensor], orig: dict[str, torch.Tensor],
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

    # -- the candidate's runs ----------------------------------------------------------------------------
    def _returned(self, case: CaseSpec, value: ReturnValue | None, frames: list[torch.Tensor],
                  label: str) -> dict[str, torch.Tensor]:
        """Outputs the candidate returned by value; a return that breaks the op contract fails the case."""
        value = value or ReturnValue(container="none")
        passed, by_value = self._passing(case.call)
        tensors = iter(frames)
        got: list[tuple[Returned, torch.Tensor | None]] = [
            (it, next(tensors) if it.kind == "tensor" else None) for it in value.items]
        want = self.manifest.signature.returns
        if want is None:  # unchecked: outputs not passed come back in order
            vals = [t for it, t in got if it.kind == "tensor" and t is not None]
            if len(vals) < len(by_value):
                raise self._fail(case, "wrong return value", f"{label}: returned {len(vals)} new tensor(s), the "
                                 f"op returns {by_value}")
            return dict(zip(by_value, vals))

        def shown(v: ReturnValue) -> str:
            if v.container in ("none", "other"):
                return v.type_name or "None"
            parts = [(it.name or "?") if it.kind == "arg" else (f"new tensor {it.shape}" if it.kind == "tensor"
                     else it.type_name or "None") for it in v.items]
            return parts[0] if v.container == "tensor" else f"{v.container}({', '.join(str(p) for p in parts)})"

        expect = "None" if not want else want[0] if len(want) == 1 else f"({', '.join(want)})"
        container = "none" if not want else "tensor" if len(want) == 1 else None
        bad = (value.container != container if container else value.container not in ("tuple", "list")
               or len(got) != len(want))
        out: dict[str, torch.Tensor] = {}
        for name, (it, t) in zip(want, got):
            if bad:
                break
            if name in passed:
                bad = not (it.kind == "arg" and it.name == name)
            elif it.kind != "tensor" or t is None:
                bad = True
            else:
                out[name] = t
        if bad:
            raise self._fail(case, "wrong return value", f"{label}: the entry point returned {shown(value)}; the op "
                             f"contract says it returns {expect} (passed buffers as themselves)")
        return out

    def _cand_run(self, case: CaseSpec, vals: dict[str, torch.Tensor], label: str, base: int = 0,
                  finite_prefill: bool = False) -> tuple[ArgSet, dict[str, torch.Tensor]]:
        assert self.arena is not None
        label += self._form(case)
        a = ArgSet(self.manifest, case.dims, case.dtype, self.device, self.op_inputs)
        a.fill(case.distribution, None, vals)  # type: ignore[arg-type]
        if finite_prefill:
            a.fill_outputs(finite=True)
        layout = put(self.arena, a, base)
        reply, frames = self._ask(Run(dtype=case.dtype, layout=layout, call=case.call), case, label)
        got = take(self.arena, layout, a)
        if not reply.ok:
            raise self._launch_error(case, reply, label)
        return got, self._judge(case, got, vals, reply, frames, label)

    def _judge(self, case: CaseSpec, got: ArgSet, vals: dict[str, torch.Tensor], reply: Reply,
               frames: list[torch.Tensor], label: str) -> dict[str, torch.Tensor]:
        """What one candidate call left in memory and returned: its outputs, or the case's failure."""
        self._memory_checks(case, got, vals, label)
        by_value = self._passing(case.call)[1]
        outs = {n: got.tensors[n].view for n in self.compared if n not in by_value}
        outs.update(self._returned(case, reply.returned, frames, label))
        return outs

    def _memory_checks(self, case: CaseSpec, got: ArgSet, vals: dict[str, torch.Tensor], label: str) -> None:
        for name, g in got.tensors.items():
            if not g.guards_intact():
                raise self._fail(case, "out-of-bounds write", f"{label}: memory next to {name!r} was written",
                                 tensor=name)
        for name in self.inputs:
            if not torch.equal(bits(got.tensors[name].view), bits(vals[name])):
                raise self._fail(case, "input mutated", f"{label}: input {name!r} changed", tensor=name)

    def _launch_error(self, case: CaseSpec, reply: Reply, label: str) -> CaseFailure:
        f = self._fail(case, "launch error", f"{label}: {reply.error[:2000]}")
        f.sticky = reply.sticky
        return f

    def _shift(self, case: CaseSpec, k: int) -> int:
        """A byte offset for the k-th placement of a case: new addresses in the worker."""
        from astra_sglang.harness.arena import ALIGN

        return ALIGN * ((case.seed + 7 * k) % 5 + k) if k else 0

    # -- correctness -------------------------------------------------------------------------------------
    def check_case(self, case: CaseSpec) -> None:
        vals = self._values(case, case.seed)
        if self.candidate is None:
            orig = self._orig_run(case, vals)
            ref = self._reference(case, vals)
            for name in self.compared:
                if name in ref:
                    tol = self.manifest.tolerances[case.dtype]
                    side = (ref.get(scale_key(name)), ref.get(segments_key(name)))
                    m = compare_to_reference(name, orig[name], ref[name], tol, *side)
                    if m is not None:
                        raise self._fail(case, m.reason, f"original: {m.detail}", name, m)
                    used = tolerance_used(orig[name], ref[name], tol, *side)
                    seen = self.reference_error.get(name, (0.0, 0.0))
                    self.reference_error[name] = (max(seen[0], used[0]), max(seen[1], used[1]))
            return
        try:
            _, first = self._cand_run(case, vals, "first run (before the original)")
        except CaseFailure as f:
            self._outside_domain(case, vals, f)
            raise
        orig = self._orig_run(case, vals)
        _, second = self._cand_run(case, vals, "second run (after the original, new addresses)",
                                   base=self._shift(case, 1))
        ref = self._reference(case, vals)
        for label, outs in (("first run", first), ("second run", second)):
            label += self._form(case)
            bad = self._check(case, outs, orig, ref)
            if bad is not None:
                raise self._diagnose(case, vals, orig, ref, label, *bad)

    def _outside_domain(self, case: CaseSpec, vals: dict[str, torch.Tensor], f: CaseFailure) -> None:
        """Skip (raised) where the candidate failed a case the original refuses too (it raises there: outside the
        op's domain, SGLang never gets past it); returns where the failure stands.

        A refusal (a launch error) is skipped as before. A worker that crashed, hung or poisoned its CUDA context
        there is replaced by a fresh one with the candidate loaded again, so the rest of the suite runs, and the
        case is skipped and counted (``died_outside_domain``, a note). Without ``start_worker`` (a sweep's quick
        check, which starts its own) the failure stands."""
        died = f.sticky or f.failure.reason in ("crash", "timeout")
        if not died and f.failure.reason != "launch error":
            return
        if died and self.start_worker is None:
            return
        try:
            self._orig_run(case, vals, served_fallback=False)
        except Skip as s:
            if not died:
                raise
            self._fresh_worker()
            self.died_outside_domain += 1
            raise Skip(f"{s}; the candidate's worker died there too ({f.failure.reason}): skipped") from None

    def _fresh_worker(self) -> None:
        """Replace a dead or hung worker (its whole process group killed) by a fresh one with the candidate loaded
        and the tripwire read, as at the start."""
        assert self.worker is not None and self.start_worker is not None
        self.worker.close()
        self.worker = self.start_worker()
        self._latency_us = None
        self._gpu_watched, self._gpu_watch = False, None  # NVML watches a pid
        reply, _ = self._ask(Load(dtypes=self._load_dtypes), None, "candidate import (fresh worker)")
        if not reply.ok:
            raise CaseFailure(FailedCase(reason="crash", detail="the candidate no longer imports in a fresh worker: "
                                         + reply.error[:2000]))
        self._tampered(reply.tampered, "right after the candidate was imported in a fresh worker")

    def _diagnose(self, case: CaseSpec, vals: dict[str, torch.Tensor], orig: dict[str, torch.Tensor],
                  ref: dict[str, torch.Tensor], label: str, name: str, m: Mismatch) -> CaseFailure:
        """Name the cause: history-dependent (stateful), never-written, or NaN from reading the output buffer."""
        _, again = self._cand_run(case, vals, "diagnostic re-run (new addresses)", base=self._shift(case, 2))
        if self._check(case, again, orig, ref) is None:
            return self._fail(case, "stateful", f"{label}: {m.detail}; the same inputs at new addresses give the "
                              "right answer: the output depends on earlier calls or on addresses (state kept "
                              "between calls) or is nondeterministic", name, m)
        if m.reason in ("nan", "unwritten output"):
            _, fin = self._cand_run(case, vals, "diagnostic re-run (finite prefill)", finite_prefill=True)
            out = fin[name]
            if out.dtype.is_floating_point and bool(((out == 1234.5) & (orig[name] != 1234.5)).any()):
                return self._fail(case, "unwritten output", f"{label}: {m.detail}; with a finite prefill those "
                                  "elements keep the prefill: never written", name, m)
            return self._fail(case, "nan", f"{label}: {m.detail}", name, m)
        return self._fail(case, m.reason, f"{label}: {m.detail}", name, m)

    def stateful_check(self, case: CaseSpec) -> None:
        """Same buffers, new values: a result cached by pointer (or by anything but the data) shows up here."""
        base = self._shift(case, 3)
        for k in range(2):
            vals = self._values(case, case.seed + 7919 * (k + 1))
            try:
                _, outs = self._cand_run(case, vals, "same-address re-run", base=base)
            except CaseFailure as f:
                self._outside_domain(case, vals, f)
                raise
            orig = self._orig_run(case, vals)
            ref = self._reference(case, vals)
            bad = self._check(case, outs, orig, ref)
            if bad is not None and k > 0:
                raise self._fail(case, "stateful", f"same input addresses, new values: {bad[1].detail} (the "
                                 "candidate returns a result kept from an earlier call)", bad[0], bad[1])
            if bad is not None:
                raise self._fail(case, bad[1].reason, bad[1].detail, bad[0], bad[1])

    # -- timing ------------------------------------------------------------------------------------------
    def _latency(self) -> float:
        """The round trip of an empty request (max of a few), in us: the fixed part of every batch's wall."""
        if self._latency_us is None:
            worst = 0.0
            for _ in range(5):
                t0 = time.perf_counter()
                self._ask(Ping(), None, "ping")
                worst = max(worst, time.perf_counter() - t0)
            self._latency_us = 1.5e6 * worst + 200.0
        return self._latency_us

    def _watch_gpu(self) -> GpuWatch | None:
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
            self._gpu_watch = GpuWatch.open(self.worker.proc.pid, uuid) if uuid else None
            if self._gpu_watch is None:
                self.notes.append("NVML not available: the worker is stopped while the original is timed, but "
                                  "GPU work it queued before is not watched (it may still run then)")
        return self._gpu_watch

    @contextmanager
    def _quiet(self, label: str) -> Iterator[None]:
        """The body (this process timing something of its own) runs with the candidate's worker stopped, its
        whole process group, so nothing the candidate started (threads, a helper process) can load the machine
        then (issue 22, class 4); continued after, also on an exception. On CUDA the worker's GPU work queued
        before the stop is waited for, and any SM activity of the worker during the body is recorded
        (``_gpu_busy``): the shape's timing is then suspect, as it is when ``Child.stopped`` could not see every
        thread of the group stopped (``_unstopped``: the body ran beside a running thread)."""
        if self.worker is None or self.worker.closed or self.worker.proc.poll() is not None:
            with self._window(label):
                yield
            return
        with self.worker.stopped() as ok:
            if not ok:  # a thread of the group kept running (e.g. in an uninterruptible call): the shape is suspect
                self._unstopped += 1
            watch = None if self.screening else self._watch_gpu()
            since = watch.wait_quiet() if watch is not None else 0
            try:
                with self._window(label):
                    yield
            finally:
                if watch is not None:
                    self._gpu_busy = max(self._gpu_busy, watch.active_since(since))

    @contextmanager
    def _window(self, label: str) -> Iterator[None]:
        """Record the body's monotonic window in the test hook's file (``DEBUG_WINDOWS_ENV``), if set."""
        path = os.environ.get(DEBUG_WINDOWS_ENV)
        t0 = time.monotonic_ns()
        try:
            yield
        finally:
            if path:
                with open(path, "a") as f:
                    f.write(f"{t0} {time.monotonic_ns()} {label}\n")

    def _local_sets(self, dims: dict[str, int], dtype: str, n: int, seed: int) -> list[ArgSet]:
        sets = []
        for i in range(n):
            a = ArgSet(self.manifest, dims, dtype, self.device, self.op_inputs)
            a.fill("normal", torch.Generator(device=self.device).manual_seed(seed + i))
            sets.append(a)
        return sets

    def time_shape(self, dims: dict[str, int], dtype: str, ceiling: float, l2: int,
                   wall_check: bool = True) -> TimedShape:
        """``wall_check`` off only in a sweep, whose chosen source is timed again with it (sweep_checks.py)."""
        cfg, clock = self.cfg, self.clock
        probe = ArgSet(self.manifest, dims, dtype, self.device, self.op_inputs)
        bytes_moved = probe.bytes_moved()
        del probe
        cold = cfg.mode == "cold"
        n_sets = timing.rotation_sets(bytes_moved, l2, cfg.cold_l2_factor, cfg.max_graph_launches, cold)
        per_replay = n_sets if cold else cfg.warm_launches
        self._per_replay = per_replay
        case = CaseSpec(dims=dict(dims), dtype=dtype, distribution="normal", seed=self.job.timing_seed)
        orig_launch, stand_in = self._timed_original(case)  # Skip (not timed) when nothing stands in

        def body(launch: Launcher, argsets: list[ArgSet]) -> Callable[[], None]:
            arglists = [a.args() for a in argsets] if cold else [argsets[0].args()] * per_replay

            def run_all() -> None:
                for args in arglists:
                    launch(args)
            return run_all

        local: list[tuple[str, Any]] = []  # (label, graph or eager body) timed in this process
        guards: dict[str, ReplayGuard] = {}  # label -> its sets' outputs, poisoned before every replay
        eager = False
        orig_sets = self._local_sets(dims, dtype, n_sets, case.seed)
        orig_body = body(orig_launch, orig_sets)
        try:
            local.append(("original", clock.capture(orig_body)))
        except Exception as e:  # noqa: BLE001 - the original cannot be captured: time eagerly, both sides
            self.notes.append(f"original not capturable ({str(e)[:200]}); eager timing with full synchronisation")
            local.append(("original", orig_body))
            eager = True
        outputs = self._kept_outputs()
        if not eager:
            guards["original"] = ReplayGuard(orig_sets if cold else orig_sets[:1], outputs)
        method = "eager, all streams synchronised before each end event" if eager else "cuda-graph replay"
        baseline = None if eager or stand_in else self._baseline(dtype, dims)
        if baseline is not None:
            try:
                base_sets = self._local_sets(dims, dtype, n_sets, case.seed)
                local.append((baseline[0], clock.capture(body(baseline[1], base_sets))))
                guards[baseline[0]] = ReplayGuard(base_sets if cold else base_sets[:1], outputs)
            except Exception as e:  # noqa: BLE001
                self.notes.append(f"baseline {baseline[0]} not capturable: {str(e)[:200]}")
                baseline = None
        if self.candidate is not None:
            reply, _ = self._ask(Prepare(dims=dims, dtype=dtype, n_sets=n_sets, per_replay=per_replay, cold=cold,
                                         seed=case.seed, eager=eager), case, "timing set-up")
            if not reply.ok and stand_in and not reply.sticky:
                raise Skip(f"the candidate refuses {dims} {dtype}, which the original refuses too: {reply.error[:200]}")
            if not reply.ok:
                what = "the candidate failed at the timed shape" if eager else "CUDA-graph capture of the candidate failed"
                raise self._fail(case, "launch error", f"{what}: {reply.error[:1000]} (SGLang replays kernels in "
                                 "CUDA graphs)")

        def run_local(label: str, g: Any, n: int) -> list[float]:
            if eager:
                return clock.time_eager(g, n, per_replay)
            return clock.time_replays(g, n, per_replay, guards[label].between(n))

        # the candidate's timed replays are checked too (replay_guard.py): one random replay of each batch,
        # one random timing set of it, against the original on the same arguments
        self._kept_check = (case, n_sets if cold else 1) if not eager and outputs and not self.screening else None

        warmup, rep = self.job.warmup, self.job.rep
        self._gpu_busy = self._unstopped = 0
        with self._quiet("warm-up"):
            for label, g in local:
                run_local(label, g, warmup)
        if self.candidate is not None:
            self._ask(Time(replays=warmup), case, "warm-up")
        us: dict[str, list[float]] = {label: [] for label, _ in local}
        us["candidate"] = []
        batches = max(1, -(-rep // BATCH))
        for b in range(batches):
            k = min(BATCH, rep - b * BATCH)
            for side in timing.abba(b, 2 if self.candidate is not None else 1):
                if side == 0:
                    with self._quiet(f"batch {b}"):
                        for label, g in local:
                            us[label] += run_local(label, g, k)
                else:
                    us["candidate"] += self._time_candidate(case, k)[0]
        wall_reason = None
        if self.candidate is not None and wall_check:
            # one long batch per side (>= WALL_BATCH_US of the original) held against this process's clock
            k = int(min(4000, max(1, WALL_BATCH_US / max(statistics.median(us["original"]) * per_replay, 1.0))))
            with self._quiet("wall-clock batch"):
                t0 = time.perf_counter()
                own = sum(run_local(local[0][0], local[0][1], k)) * per_replay
                own_wall = (time.perf_counter() - t0) * 1e6
            reported, wall = self._time_candidate(case, k)[1:]
            calib = min(1.0, own / own_wall) if own_wall > 0 else 1.0
            why = timing.wall_suspect(reported, wall, k, self._latency(), WALL_RATIO * calib)
            # the median the speedup is computed from must agree with that batch too (a worker that forges
            # only the interleaved batches and tells the truth about the long one)
            why = why or timing.wall_suspect(statistics.median(us["candidate"]) * per_replay * k, wall, k,
                                             self._latency(), WALL_RATIO * calib)
            wall_reason = f"timing not backed by the wall clock: {why}" if why else None
        samples = {label: timing.Samples(v) for label, v in us.items() if v}
        if self.candidate is not None:
            if not self.screening:
                self.after_timing_check(case, not eager and not self._warm_inplace())
            self._ask(Release(), case, "timing release")
            reply, _ = self._ask(Verify(), case, "tripwire")
            self._tampered(reply.tampered, "after timing")
        orig_us = samples["original"].median
        spread = max(s.spread_pct for label, s in samples.items() if label in ("original", "candidate"))
        gbps = lambda t: bytes_moved / (t * 1e-6) / 1e9  # noqa: E731
        row: dict[str, Any] = dict(dims=dims, dtype=dtype, original_us=orig_us, spread_pct=spread,
                                   bytes_moved=bytes_moved, original_gbps=gbps(orig_us),
                                   original_pct_ceiling=100.0 * gbps(orig_us) / ceiling,
                                   rotation_bytes=bytes_moved * (n_sets if cold else 1), samples=rep)
        if baseline is not None and baseline[0] in samples:
            row.update(baseline_name=baseline[0], baseline_us=samples[baseline[0]].median)
        suspect_reason = None
        if self.candidate is not None:
            cand_us = samples["candidate"].median
            speedup = orig_us / cand_us
            reasons = []
            if gbps(cand_us) > ceiling * (1 + cfg.suspect_margin):
                reasons.append(f"candidate at {gbps(cand_us):.0f} GB/s exceeds the measured copy ceiling "
                               f"{ceiling:.0f} GB/s by more than {100 * cfg.suspect_margin:.0f}%")
            if wall_reason:
                reasons.append(wall_reason)
            if self._unstopped:
                reasons.append(f"the candidate's worker was not seen stopped within {STOP_WAIT_S:.0f} s in "
                               f"{self._unstopped} of the windows in which the original was timed (a thread kept "
                               "running beside it)")
            if self._gpu_busy:
                reasons.append(f"the candidate's worker, stopped, still ran GPU work (up to {self._gpu_busy}% SM "
                               "in NVML's samples) while the original was timed")
            suspect_reason = "; ".join(reasons) or None
            row.update(candidate_us=cand_us, speedup=speedup, candidate_gbps=gbps(cand_us),
                       candidate_pct_ceiling=100.0 * gbps(cand_us) / ceiling,
                       verdict=timing.verdict(speedup, max(spread, cfg.min_change_pct), bool(reasons)))
        row.update(self._served_fields(dims, dtype, row, stand_in))
        del local
        if self.device == "cuda":
            torch.cuda.empty_cache()
        return TimedShape(row=ShapeTiming(**row), method=method, suspect_reason=suspect_reason)

    def _time_candidate(self, case: CaseSpec, k: int) -> tuple[list[float], float, float]:
        """k timed replays in the worker: their per-launch times, the total it reports and the wall time (us)
        this process saw the request take."""
        keep = _SECRET.randrange(k) if self._kept_check is not None else None
        t0 = time.perf_counter()
        reply, _ = self._ask(Time(replays=k, keep=keep), case, "timing")
        wall = (time.perf_counter() - t0) * 1e6
        if not reply.ok:
            raise self._launch_error(case, reply, "timed replay")
        if len(reply.us) != k or not all(math.isfinite(u) and u > 0 for u in reply.us):
            raise self._fail(case, "protocol violation", f"the worker reported {len(reply.us)} times for {k} "
                             "replays, or times that are not positive numbers")
        if keep is not None:
            self._check_kept(keep, k)
        return reply.us, sum(reply.us) * self._per_replay, wall

    def _kept_outputs(self) -> list[str]:
        """What a timed replay's check compares: the output buffers; none for an op that returns its outputs by
        value, or that changes an argument in place (replays apply it again and again: no one call's result)."""
        tensors = self.manifest.signature.tensors
        if self.by_value or any(t.role == "inplace" for t in tensors):
            if "timed replays: only the one re-checked after timing" not in " ".join(self.notes):
                self.notes.append("timed replays: only the one re-checked after timing is checked (outputs by "
                                  "value or in place)")
            return []
        return [t.name for t in tensors if t.role == "output"]

    def _check_kept(self, keep: int, k: int) -> None:
        """Timed replay ``keep`` of the batch, on timing sets chosen now (all of up to four, else two at random):
        their outputs as the worker kept them, against the original's and the reference on each set's
        arguments (same seed), guard bands intact."""
        assert self._kept_check is not None
        case, n_used = self._kept_check
        for index in range(n_used) if n_used <= 4 else _SECRET.sample(range(n_used), 2):
            self._check_kept_set(case, keep, k, index, n_used)

    def _check_kept_set(self, case: CaseSpec, keep: int, k: int, index: int, n_used: int) -> None:
        assert self.arena is not None
        vals = self._values(case, case.seed + index)
        a = ArgSet(self.manifest, case.dims, case.dtype, self.device, self.op_inputs)
        a.fill("normal", None, vals)  # type: ignore[arg-type]
        layout = put(self.arena, a, 0)
        label = f"timed replay {keep + 1} of {k}, timing set {index + 1} of {n_used}"
        reply, _ = self._ask(Collect(layout=layout, index=index), case, label)
        if not reply.ok:
            raise self._fail(case, "protocol violation", f"{label}: the worker kept no outputs ({reply.error[:300]})")
        got = take(self.arena, layout, a)
        outputs = self._kept_outputs()
        for name in outputs:
            if not got.tensors[name].guards_intact():
                raise self._fail(case, "out of bounds write", f"{label}: {name} written outside its bounds", name)
        orig, ref = self._orig_run(case, vals), self._reference(case, vals)
        tol = self.manifest.tolerances[case.dtype]
        for name in outputs:
            m = compare(name, got.tensors[name].view, orig[name], ref.get(name), tol, ref.get(scale_key(name)),
                        ref.get(segments_key(name)))
            if m is not None:
                raise self._fail(case, "timed run wrong", f"{label}: {m.detail} (a timed replay did less than a "
                                 "checked call)", name, m)

    def _warm_inplace(self) -> bool:
        """A warm replay applies an in-place op several times to one buffer: not one call's result."""
        return self.cfg.mode == "warm" and any(t.role == "inplace" for t in self.manifest.signature.tensors)

    def after_timing_check(self, case: CaseSpec, graph: bool) -> None:
        """The timed runs must compute the function: replay the timed graph on new values in the same buffers,
        then call the candidate eagerly on the same addresses with new values again."""
        assert self.arena is not None
        steps = (("timed graph replay", True), ("eager call at the timed addresses", False))
        for k, (label, g) in enumerate(steps):
            if g and not graph:
                continue
            vals = self._values(case, case.seed + 104729 * (k + 1))
            a = ArgSet(self.manifest, case.dims, case.dtype, self.device, self.op_inputs)
            a.fill("normal", None, vals)  # type: ignore[arg-type]
            layout = put(self.arena, a, 0)
            reply, frames = self._ask(Recheck(layout=layout, graph=g), case, f"after timing ({label})")
            if not reply.ok:
                raise self._launch_error(case, reply, f"after timing ({label})")
            got = take(self.arena, layout, a)
            if g and self.by_value:
                continue  # outputs returned by value are not observable from a replay
            if g:
                self._memory_checks(case, got, vals, f"after timing ({label})")
                outs = {n: got.tensors[n].view for n in self.compared}
            else:
                outs = self._judge(case, got, vals, reply, frames, f"after timing ({label})")
            orig = self._orig_run(case, vals)
            ref = self._reference(case, vals)
            bad = self._check(case, outs, orig, ref)
            if bad is not None:
                reason = "timed run wrong" if g else "stateful"
                raise self._fail(case, reason, f"after timing, {label} with new values: {bad[1].detail}"
                                 + (" (the captured graph does not compute the function: work hidden from the "
                                    "capture stream or skipped)" if g else ""), bad[0], bad[1])

    def _baseline(self, dtype: str, dims: dict[str, int]) -> tuple[str, Launcher] | None:
        """The library kernel SGLang really serves with (e.g. FlashInfer's), timed beside the original."""
        if not self.cfg.time_baselines:
            return None
        listed = self.manifest.baselines
        if states_serving(self.manifest):  # only what SGLang serves here (None: the original itself)
            served = served_baseline(self.manifest, dims, dtype)
            listed = [served] if served is not None else []
        for b in listed:
            if b.name not in self.job.baselines or (isinstance(b.recipe, CudaJitRecipe)
                                                    and dtype not in b.recipe.template_args):
                continue
            try:
                launch = make_launcher(self.op_dir, self.manifest, dtype, recipe=b.recipe, arch=self.cfg.arch,
                                       cache_dir=self.cfg.cache_dir)
                probe = ArgSet(self.manifest, dims, dtype, self.device, self.op_inputs)
                probe.fill("normal", torch.Generator(device=self.device).manual_seed(1))
                launch(probe.args())
                # A launch refused for its configuration (FlashInfer's merge_state above 64 heads at D=128: more
                # than 1024 threads a block) leaves only CUDA's last-error flag set, which no sync reports: the
                # next torch kernel launch raised it, inside the timing of another shape. A torch launch here
                # collects it where it belongs.
                torch.zeros(1, device=self.device).add_(1)
                self.clock.sync()
            except Exception as e:  # noqa: BLE001 - a baseline that refuses a shape is simply not timed there
                if any(s in str(e) for s in CUDA_STICKY) and not any(s in str(e) for s in LAUNCH_REFUSED):
                    raise
                continue
            return b.name, launch
        return None

    def _baseline_alone(self, dims: dict[str, int], dtype: str, l2: int) -> str:
        """Where the original refuses a shape, what SGLang's library path takes there (a note, not a row)."""
        b = self._baseline(dtype, dims)
        if b is None:
            return ""
        cfg = self.cfg
        probe = ArgSet(self.manifest, dims, dtype, self.device, self.op_inputs)
        n = timing.rotation_sets(probe.bytes_moved(), l2, cfg.cold_l2_factor, cfg.max_graph_launches,
                                 cfg.mode == "cold")
        arglists = [a.args() for a in self._local_sets(dims, dtype, n, 0)]

        def run_all() -> None:
            for args in arglists:
                b[1](args)
        try:
            (smp,), _ = timing.time_interleaved(self.clock, [run_all], cfg.warmup or 20, self.job.rep, n)
        except Exception as e:  # noqa: BLE001
            return f"; baseline {b[0]} failed to time: {str(e)[:100]}"
        return f"; baseline {b[0]} takes {smp.median:.2f} us there ({cfg.mode} L2)"

    # -- what SGLang serves (Baseline.serves) ----------------------------------------------------------------
    def _served_launcher(self, dims: dict[str, int], dtype: str,
                         same_function: bool) -> tuple[Baseline, Launcher] | None:
        """The baseline SGLang dispatches to for this shape, built (cached) here; None when the manifest states
        no serving rules, the original is what is served, or (``same_function``) it computes another function."""
        if not states_serving(self.manifest):
            return None
        b = served_baseline(self.manifest, dims, dtype)
        if b is None or b.recipe is None or (same_function and not b.same_function):
            return None
        if isinstance(b.recipe, CudaJitRecipe) and dtype not in b.recipe.template_args:
            return None
        key = (b.name, dtype)
        if key not in self._served_fns:
            self._served_fns[key] = make_launcher(self.op_dir, self.manifest, dtype, recipe=b.recipe,
                                                  arch=self.cfg.arch, cache_dir=self.cfg.cache_dir)
        return b, self._served_fns[key]

    def _served_run(self, case: CaseSpec, vals: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        """Outputs of the same-function kernel SGLang serves for a case the original refuses; None if none does
        (or it refuses the case as well)."""
        served = self._served_launcher(case.dims, case.dtype, same_function=True)
        if served is None:
            return None
        b, launch = served
        a = ArgSet(self.manifest, case.dims, case.dtype, self.device, self.op_inputs)
        a.fill(case.distribution, None, vals)  # type: ignore[arg-type]
        try:
            ret = launch(a.args())
            self.clock.sync()
        except Exception as e:  # noqa: BLE001
            if any(s in str(e) for s in CUDA_STICKY):
                raise
            return None
        if b.returns is None:
            outs = self._outs(ret, a)
        else:  # SGLang's eager fallback returns new tensors instead of writing in place
            seq = list(ret) if isinstance(ret, (tuple, list)) else [ret]
            outs = {n: a.tensors[n].view for n in self.compared}
            outs.update(dict(zip(b.returns, seq)))
        return {n: t.clone() for n, t in outs.items()}

    def _timed_original(self, case: CaseSpec) -> tuple[Launcher, str | None]:
        """What the candidate is timed against: the original, or where it refuses the shape the kernel SGLang
        serves there (its name second); Skip when neither runs."""
        try:
            self._orig_run(case, self._values(case, case.seed), served_fallback=False)
            return self._orig_launcher(case.dtype), None
        except Skip:
            served = self._served_launcher(case.dims, case.dtype, same_function=True)  # checkable there
            if served is None:
                raise
            a = ArgSet(self.manifest, case.dims, case.dtype, self.device, self.op_inputs)
            a.fill("normal", torch.Generator(device=self.device).manual_seed(case.seed))
            try:
                served[1](a.args())
                self.clock.sync()
            except Exception as e:  # noqa: BLE001
                if any(s in str(e) for s in CUDA_STICKY):
                    raise
                raise Skip(f"neither the original nor {served[0].name} runs {case.dims} {case.dtype}") from None
            return served[1], served[0].name

    def _served_fields(self, dims: dict[str, int], dtype: str, row: dict[str, Any],
                       stand_in: str | None) -> dict[str, Any]:
        """A timed row's comparison with what SGLang serves for the shape (nothing where the manifest is silent)."""
        if not states_serving(self.manifest):
            return {}
        b = served_baseline(self.manifest, dims, dtype)
        out: dict[str, Any] = {"served_by": b.name if b is not None else ORIGINAL}
        if stand_in is not None:
            out.update(original_refused=True, baseline_name=stand_in, baseline_us=row["original_us"])
            out["served_us"] = row["original_us"]
        elif b is None:
            out["served_us"] = row["original_us"]
        elif row.get("baseline_name") == b.name:
            out["served_us"] = row["baseline_us"]
        cand = row.get("candidate_us")
        if out.get("served_us") and cand:
            out["served_speedup"] = out["served_us"] / cand
        return out

    # -- the job -----------------------------------------------------------------------------------------
    def run(self) -> CheckResult:
        out = CheckResult(device="cpu (TRITON_INTERPRET=1)")
        try:
            return self._run(out)
        finally:  # the model copies lists it is given: notes added after construction would be lost
            out.notes = list(self.notes)

    def _run(self, out: CheckResult) -> CheckResult:
        cases = self.job.cases
        dtypes = sorted({c.dtype for c in cases} | set(self.job.timing_dtypes))
        self._load_dtypes = dtypes
        for dt in sorted({c.dtype for c in cases}):
            self._orig_launcher(dt)
        failure: FailedCase | None = None
        if self.candidate is not None:
            self.progress(Progress(step="load"))
            try:
                reply, _ = self._ask(Load(dtypes=dtypes), None, "candidate import")
                if not reply.ok:  # a candidate that does not load/import failed to build
                    out.build_error = reply.error
                    return out
                self._tampered(reply.tampered, "right after the candidate was imported")
            except CaseFailure as f:
                failure = f.failure
        if self.timed:
            out.device = self.clock.device_name()
            self.progress(Progress(step="warm-up"))
            self.clock.warm(self.cfg.gpu_warmup_s)
            out.ceiling = self.job.ceiling or self.clock.copy_ceiling_gbps()
        run = heldout = 0
        try:
            if failure is not None:
                raise CaseFailure(failure)
            for i, case in enumerate(cases):
                self.progress(Progress(step="check", index=i, heldout=case.heldout,
                                       case=None if case.heldout else case))
                try:
                    self.check_case(case)
                except Skip as s:
                    self.skipped += 1
                    if len(self.notes) < 20 and not case.heldout:
                        self.notes.append(str(s))
                    continue
                run += 1
                heldout += int(case.heldout)
            if self.died_outside_domain:
                self.notes.append(f"{self.died_outside_domain} case(s) skipped where the candidate's worker crashed "
                                  "or hung and the original refuses the case too (outside the op's domain)")
            if self.candidate is not None:
                visible = sorted((c for c in cases if not c.heldout and c.distribution == "normal"
                                  and c.call is None),
                                 key=lambda c: math.prod(c.dims.values()))
                for case in visible[: self.cfg.stateful_checks]:
                    self.progress(Progress(step="stateful", case=case))
                    try:
                        self.stateful_check(case)
                    except Skip:
                        continue
                reply, _ = self._ask(Verify(), None, "tripwire")
                self._tampered(reply.tampered, "after the correctness runs")
        except CaseFailure as f:
            failure = f.failure
        out.correctness = CorrectnessReport(ok=failure is None, cases_run=run, heldout_cases_run=heldout,
                                            first_failure=failure, skipped_cases=self.skipped,
                                            reference_error=dict(self.reference_error))
        # the original alone off its reference is a finding about the extraction: report it, still time it
        finding = self.candidate is None and failure is not None and failure.reason == "reference mismatch"
        if (failure is not None and not finding) or not self.timed or not self.cfg.timing:
            return out
        assert out.ceiling is not None
        l2 = self.clock.l2_bytes()
        shapes: list[TimedShape] = []
        try:
            for dims in self.job.timed_shapes:
                for dt in self.job.timing_dtypes:
                    self.progress(Progress(step="time", dims=dims, dtype=dt))
                    try:
                        shapes.append(self.time_shape(dims, dt, out.ceiling, l2))
                    except Skip as s:
                        self.notes.append(f"not timed: {s}{self._baseline_alone(dims, dt, l2)}")
        except CaseFailure as f:
            out.correctness = out.correctness.model_copy(update={"ok": False, "first_failure": f.failure})
            return out
        out.timing = shapes
        return out
