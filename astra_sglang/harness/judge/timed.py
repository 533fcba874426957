"""Timed shapes: the original (and SGLang's library baseline) timed here, the candidate in its worker, in
ABBA-interleaved batches (``timing.interleave``). The worker is stopped while this process times anything of its
own; one random replay of each candidate batch is checked (``replay_guard``); one long batch per side is held
against this process's wall clock; and the timed graph is re-checked on new values afterwards.
"""

from __future__ import annotations

import math
import os
import random
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from astra_sglang.checker import (
    compare,
    scale_key,
    segments_key,
)
from astra_sglang.contract.result import ShapeTiming
from astra_sglang.harness.judge.session import (
    JudgeSession,
    Launcher,
    Skip,
    collect_launch_error,
    poisons_context,
)
from astra_sglang.harness.shared import timing
from astra_sglang.harness.shared.arena import put, take
from astra_sglang.harness.shared.isolation import STOP_WAIT_S
from astra_sglang.harness.shared.protocol import (
    TIMING_BATCH as BATCH,
)
from astra_sglang.harness.shared.protocol import (
    CaseSpec,
    Collect,
    Prepare,
    Progress,
    Recheck,
    Release,
    Time,
    TimedShape,
    Verify,
)
from astra_sglang.harness.shared.replay_guard import ReplayGuard, perturb, perturbable
from astra_sglang.harness.shared.tensors import ArgSet

_SECRET = random.SystemRandom()  # which timed replay and set are checked: never derived from a seed the worker sees

WALL_RATIO = 0.6  # a candidate batch reporting under this share of its wall time (less allowances) is suspect
WALL_BATCH_US = 50_000.0  # the wall-clock check times this long a batch (by the original's time) on each side
# Test hook: where set, the judge appends "<start_ns> <end_ns> <label>" (time.monotonic_ns, system-wide on Linux)
# for each window in which it timed something of its own with the worker stopped (tests/test_integrity2_quiet_worker.py).
DEBUG_WINDOWS_ENV = "ASTRA_SGLANG_DEBUG_WINDOWS"



def _gbps(nbytes: int, us: float) -> float:
    return nbytes / (us * 1e-6) / 1e9


@dataclass
class _Arms:
    """This process's side of one timed shape."""

    local: list[tuple[str, Any]] = field(default_factory=list)  # (label, graph or eager body)
    guards: dict[str, ReplayGuard] = field(default_factory=dict)  # label -> its sets' outputs, poisoned per replay
    eager: bool = False  # the original could not be captured: both sides timed eagerly
    baseline: str | None = None  # the library kernel timed beside the original
    # the argument sets the graphs were captured on: a CUDA graph holds raw pointers, not the tensors, so once the
    # sets' last reference went with _local_arms the caching allocator handed their memory to the next allocation
    # (a replay guard's copy) and the original's replay read it as kv_indices: illegal address (H200, 2026-12-05)
    sets: list[list[ArgSet]] = field(default_factory=list)


class ShapeTimer:
    def __init__(self, session: JudgeSession):
        self.s = session
        self._kept_check: tuple[CaseSpec, int] | None = None  # the shape being timed, its timing sets in use
        self._gpu_busy = 0  # the worker's highest SM % seen while this process timed the current shape
        self._unstopped = 0  # windows of the current shape in which the worker was not seen stopped (_quiet)
        self._per_replay = 1

    @contextmanager
    def _quiet(self, label: str) -> Iterator[None]:
        """The body (this process timing something of its own) runs with the candidate's worker stopped, its
        whole process group, so nothing the candidate started (threads, a helper process) can load the machine
        then (issue 22, class 4); continued after, also on an exception. On CUDA the worker's GPU work queued
        before the stop is waited for, and any SM activity of the worker during the body is recorded
        (``_gpu_busy``): the shape's timing is then suspect, as it is when ``Child.stopped`` could not see every
        thread of the group stopped (``_unstopped``: the body ran beside a running thread)."""
        s = self.s
        if s.worker is None or s.worker.closed or s.worker.proc.poll() is not None:
            with self._window(label):
                yield
            return
        with s.worker.stopped() as ok:
            if not ok:  # a thread of the group kept running (e.g. in an uninterruptible call): the shape is suspect
                self._unstopped += 1
            watch = None if s.screening else s.watch_gpu()
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
        s = self.s
        sets = []
        for i in range(n):
            a = ArgSet(s.manifest, dims, dtype, s.device, s.op_inputs)
            a.fill("normal", torch.Generator(device=s.device).manual_seed(seed + i))
            sets.append(a)
        return sets

    def time_all(self, ceiling: float) -> list[TimedShape]:
        """Every timed shape of the job in every timing dtype; a shape neither the original nor what SGLang serves
        there runs is a note, not a row. A CaseFailure (a timed replay or re-check wrong) ends the candidate."""
        s = self.s
        l2 = s.clock.l2_bytes()
        shapes: list[TimedShape] = []
        for dims in s.job.timed_shapes:
            for dt in s.job.timing_dtypes:
                s.progress(Progress(step="time", dims=dims, dtype=dt))
                try:
                    shapes.append(self.time_shape(dims, dt, ceiling, l2))
                except Skip as skip:
                    s.notes.append(f"not timed: {skip}{s.baselines.where_refused(dims, dt, l2)}")
        return shapes

    def time_shape(self, dims: dict[str, int], dtype: str, ceiling: float, l2: int,
                   wall_check: bool = True) -> TimedShape:
        """``wall_check`` off only in a sweep, whose chosen source is timed again with it (sweep_checks.py)."""
        s = self.s
        cfg = s.cfg
        case = CaseSpec(dims=dict(dims), dtype=dtype, distribution="normal", seed=s.job.timing_seed)
        probe = ArgSet(s.manifest, dims, dtype, s.device, s.op_inputs)
        bytes_moved = probe.bytes_moved(torch.Generator(device=s.device).manual_seed(case.seed))  # set 1's draw
        del probe
        cold = cfg.mode == "cold"
        n_sets = timing.rotation_sets(bytes_moved, l2, cfg.cold_l2_factor, cfg.max_graph_launches, cold)
        self._per_replay = n_sets if cold else cfg.warm_launches
        orig_launch, stand_in = self._timed_original(case)  # Skip (not timed) when nothing stands in
        outputs = self._kept_outputs()
        arms = self._local_arms(case, orig_launch, n_sets, cold, outputs, with_baseline=stand_in is None)
        if s.candidate is not None:
            self._step("time: the candidate's timing sets", dims, dtype)
            self._prepare_candidate(case, n_sets, cold, arms.eager, stand_in)
        self._step("time: interleaved replays", dims, dtype)
        # the candidate's timed replays are checked too (replay_guard.py): one random replay of each batch,
        # one random timing set of it, against the original on the same arguments
        self._kept_check = (case, n_sets if cold else 1) if not arms.eager and outputs and not s.screening else None
        us = self._interleaved(case, arms)
        if s.candidate is not None and wall_check:
            self._step("time: wall-clock batch", dims, dtype)
        wall_reason = self._wall_reason(case, arms, us) if s.candidate is not None and wall_check else None
        if s.candidate is not None:
            if not s.screening:
                self._step("time: re-check after timing", dims, dtype)
                self.after_timing_check(case, not arms.eager and not self._warm_inplace())
            s.ask(Release(), case, "timing release")
            reply, _ = s.ask(Verify(), case, "tripwire")
            s.tampered(reply.tampered, "after timing")
        samples = {label: timing.Samples(v) for label, v in us.items() if v}
        row = self._row(dims, dtype, samples, bytes_moved, ceiling, n_sets if cold else 1, arms.baseline)
        reasons = self._suspect_reasons(row, ceiling, wall_reason)
        if s.candidate is not None:
            speedup, spread = row["speedup"], max(row["spread_pct"], cfg.min_change_pct)
            row["verdict"] = timing.verdict(speedup, spread, bool(reasons))
        row.update(s.baselines.served_fields(dims, dtype, row, stand_in))
        method = "eager, all streams synchronised before each end event" if arms.eager else "cuda-graph replay"
        del arms
        if s.device == "cuda":
            torch.cuda.empty_cache()
        return TimedShape(row=ShapeTiming(**row), method=method, suspect_reason="; ".join(reasons) or None)

    def _step(self, step: str, dims: dict[str, int], dtype: str) -> None:
        """A timed shape's parts as progress: ASTRA_SGLANG_TRACE times them (where a GPU pass spends its minutes),
        and a worker that dies or hangs is reported in the part it died in."""
        self.s.progress(Progress(step=step, dims=dims, dtype=dtype))

    def _local_arms(self, case: CaseSpec, orig_launch: Launcher, n_sets: int, cold: bool, outputs: list[str],
                    with_baseline: bool) -> _Arms:
        """What this process times: the original (captured, or eager for both sides where it cannot be) and the
        library kernel SGLang serves beside it, each on its own argument sets guarded by a ``ReplayGuard``."""
        s = self.s
        per_replay = self._per_replay

        def body(launch: Launcher, argsets: list[ArgSet]) -> Callable[[], None]:
            arglists = [a.args() for a in argsets] if cold else [argsets[0].args()] * per_replay

            def run_all() -> None:
                for args in arglists:
                    launch(args)
            return run_all

        arms = _Arms()
        orig_sets = self._local_sets(case.dims, case.dtype, n_sets, case.seed)
        arms.sets.append(orig_sets)
        orig_body = body(orig_launch, orig_sets)
        try:
            arms.local.append(("original", s.clock.capture(orig_body)))
        except Exception as e:  # noqa: BLE001 - the original cannot be captured: time eagerly, both sides
            s.notes.append(f"original not capturable ({str(e)[:200]}); eager timing with full synchronisation")
            arms.local.append(("original", orig_body))
            arms.eager = True
            return arms
        arms.guards["original"] = ReplayGuard(orig_sets if cold else orig_sets[:1], outputs)
        baseline = s.baselines.library_baseline(case.dtype, case.dims) if with_baseline else None
        if baseline is not None:
            try:
                base_sets = self._local_sets(case.dims, case.dtype, n_sets, case.seed)
                arms.sets.append(base_sets)
                arms.local.append((baseline[0], s.clock.capture(body(baseline[1], base_sets))))
                arms.guards[baseline[0]] = ReplayGuard(base_sets if cold else base_sets[:1], outputs)
                arms.baseline = baseline[0]
            except Exception as e:  # noqa: BLE001
                s.notes.append(f"baseline {baseline[0]} not capturable: {str(e)[:200]}")
        return arms

    def _prepare_candidate(self, case: CaseSpec, n_sets: int, cold: bool, eager: bool, stand_in: str | None) -> None:
        """The worker builds its own timing sets and captures its graph; a refusal where the original refuses
        too is a Skip, any other a launch error (SGLang replays kernels in CUDA graphs)."""
        s = self.s
        reply, _ = s.ask(Prepare(dims=case.dims, dtype=case.dtype, n_sets=n_sets, per_replay=self._per_replay,
                                 cold=cold, seed=case.seed, eager=eager), case, "timing set-up")
        if not reply.ok and stand_in and not reply.sticky:
            raise Skip(f"the candidate refuses {case.dims} {case.dtype}, which the original refuses too: "
                       f"{reply.error[:200]}")
        if not reply.ok:
            what = "the candidate failed at the timed shape" if eager else "CUDA-graph capture of the candidate failed"
            raise s.fail(case, "launch error", f"{what}: {reply.error[:1000]} (SGLang replays kernels in "
                         "CUDA graphs)")

    def _run_local(self, arms: _Arms, label: str, g: Any, n: int, warm_up: bool = False) -> list[float]:
        clock = self.s.clock
        if arms.eager:
            return clock.time_eager(g, n, self._per_replay)
        # the same perturbed replay as the candidate's timed batches get (replay_guard.py), so neither side is
        # favoured; none in the warm-up, as on the candidate's side
        checked = self._kept_check is not None and not warm_up
        keep, seed = (_SECRET.randrange(n), _SECRET.randrange(1 << 62)) if checked else (None, None)
        return clock.time_replays(g, n, self._per_replay, arms.guards[label].between(n, keep, seed))

    def _interleaved(self, case: CaseSpec, arms: _Arms) -> dict[str, list[float]]:
        """Warm-up, then the job's replays ABBA-interleaved in batches (``timing.interleave``): this process's
        side runs with the worker stopped, the candidate's side in the worker. Per-launch times by label."""
        s = self.s
        self._gpu_busy = self._unstopped = 0
        with self._quiet("warm-up"):
            for label, g in arms.local:
                self._run_local(arms, label, g, s.job.warmup, warm_up=True)
        if s.candidate is not None:
            s.ask(Time(replays=s.job.warmup), case, "warm-up")
        us: dict[str, list[float]] = {label: [] for label, _ in arms.local}
        us["candidate"] = []
        batch_no = iter(range(1 << 30))

        def local_side(k: int) -> None:
            with self._quiet(f"batch {next(batch_no)}"):
                for label, g in arms.local:
                    us[label] += self._run_local(arms, label, g, k)

        def candidate_side(k: int) -> None:
            us["candidate"] += self._time_candidate(case, k)[0]
        timing.interleave([local_side, candidate_side] if s.candidate is not None else [local_side], s.job.rep,
                          BATCH)
        return us

    def _wall_reason(self, case: CaseSpec, arms: _Arms, us: dict[str, list[float]]) -> str | None:
        """One long batch per side (>= WALL_BATCH_US of the original) held against this process's clock: the
        candidate's reported total, and the median the speedup comes from, must both agree with its wall time."""
        s, per_replay = self.s, self._per_replay
        k = int(min(4000, max(1, WALL_BATCH_US / max(statistics.median(us["original"]) * per_replay, 1.0))))
        label, g = arms.local[0]
        with self._quiet("wall-clock batch"):
            t0 = time.perf_counter()
            own = sum(self._run_local(arms, label, g, k)) * per_replay
            own_wall = (time.perf_counter() - t0) * 1e6
        reported, wall = self._time_candidate(case, k)[1:]
        calib = min(1.0, own / own_wall) if own_wall > 0 else 1.0
        why = timing.wall_suspect(reported, wall, k, s.latency(), WALL_RATIO * calib)
        # a worker that forges only the interleaved batches and tells the truth about the long one
        why = why or timing.wall_suspect(statistics.median(us["candidate"]) * per_replay * k, wall, k,
                                         s.latency(), WALL_RATIO * calib)
        return f"timing not backed by the wall clock: {why}" if why else None

    def _row(self, dims: dict[str, int], dtype: str, samples: dict[str, timing.Samples], bytes_moved: int,
             ceiling: float, rotation: int, baseline: str | None) -> dict[str, Any]:
        """The shape's ShapeTiming fields: medians, spread, bytes and % of the copy ceiling per side."""
        orig_us = samples["original"].median
        spread = max(smp.spread_pct for label, smp in samples.items() if label in ("original", "candidate"))
        row: dict[str, Any] = dict(dims=dims, dtype=dtype, original_us=orig_us, spread_pct=spread,
                                   bytes_moved=bytes_moved, original_gbps=_gbps(bytes_moved, orig_us),
                                   original_pct_ceiling=100.0 * _gbps(bytes_moved, orig_us) / ceiling,
                                   rotation_bytes=bytes_moved * rotation, samples=self.s.job.rep)
        if baseline is not None and baseline in samples:
            row.update(baseline_name=baseline, baseline_us=samples[baseline].median)
        if "candidate" in samples:
            cand_us = samples["candidate"].median
            row.update(candidate_us=cand_us, speedup=orig_us / cand_us, candidate_gbps=_gbps(bytes_moved, cand_us),
                       candidate_pct_ceiling=100.0 * _gbps(bytes_moved, cand_us) / ceiling)
        return row

    def _suspect_reasons(self, row: dict[str, Any], ceiling: float, wall_reason: str | None) -> list[str]:
        """Why a candidate's timing of this shape cannot be a win (any reason makes the verdict "suspect")."""
        if "candidate_gbps" not in row:
            return []
        margin = self.s.cfg.suspect_margin
        reasons = []
        if row["candidate_gbps"] > ceiling * (1 + margin):
            reasons.append(f"candidate at {row['candidate_gbps']:.0f} GB/s exceeds the measured copy ceiling "
                           f"{ceiling:.0f} GB/s by more than {100 * margin:.0f}%")
        if wall_reason:
            reasons.append(wall_reason)
        if self._unstopped:
            reasons.append(f"the candidate's worker was not seen stopped within {STOP_WAIT_S:.0f} s in "
                           f"{self._unstopped} of the windows in which the original was timed (a thread kept "
                           "running beside it)")
        if self._gpu_busy:
            reasons.append(f"the candidate's worker, stopped, still ran GPU work (up to {self._gpu_busy}% SM "
                           "in NVML's samples) while the original was timed")
        return reasons

    def _time_candidate(self, case: CaseSpec, k: int) -> tuple[list[float], float, float]:
        """k timed replays in the worker: their per-launch times, the total it reports and the wall time (us)
        this process saw the request take."""
        s = self.s
        keep = _SECRET.randrange(k) if self._kept_check is not None else None
        seed = _SECRET.randrange(1 << 62) if keep is not None else None  # that replay's inputs perturbed by it
        t0 = time.perf_counter()
        reply, _ = s.ask(Time(replays=k, keep=keep, seed=seed), case, "timing")
        wall = (time.perf_counter() - t0) * 1e6
        if not reply.ok:
            raise s.launch_error(case, reply, "timed replay")
        if len(reply.us) != k or not all(math.isfinite(u) and u > 0 for u in reply.us):
            raise s.fail(case, "protocol violation", f"the worker reported {len(reply.us)} times for {k} "
                         "replays, or times that are not positive numbers")
        if keep is not None and seed is not None:
            self._check_kept(keep, k, seed)
        return reply.us, sum(reply.us) * self._per_replay, wall

    def _kept_outputs(self) -> list[str]:
        """What a timed replay's check compares: the output buffers; none for an op that returns its outputs by
        value, or that changes an argument in place (replays apply it again and again: no one call's result)."""
        s = self.s
        tensors = s.manifest.signature.tensors
        if s.by_value or any(t.role == "inplace" for t in tensors):
            if "timed replays: only the one re-checked after timing" not in " ".join(s.notes):
                s.notes.append("timed replays: only the one re-checked after timing is checked (outputs by "
                               "value or in place)")
            return []
        return [t.name for t in tensors if t.role == "output"]

    def _check_kept(self, keep: int, k: int, seed: int) -> None:
        """Timed replay ``keep`` of the batch, on timing sets chosen now (all of up to four, else two at random):
        their outputs as the worker kept them, against the original's and the reference on each set's
        arguments (same seed), guard bands intact."""
        assert self._kept_check is not None
        case, n_used = self._kept_check
        for index in range(n_used) if n_used <= 4 else _SECRET.sample(range(n_used), 2):
            self._check_kept_set(case, keep, k, index, n_used, seed)

    def _check_kept_set(self, case: CaseSpec, keep: int, k: int, index: int, n_used: int, seed: int) -> None:
        """One timing set's outputs as kept after replay ``keep``, against the original and the reference on that
        set's values with the replay's perturbation (``replay_guard.perturb``) applied, as the worker ran it."""
        s = self.s
        assert s.arena is not None
        a = ArgSet(s.manifest, case.dims, case.dtype, s.device, s.op_inputs)
        vals = perturb(s.values(case, case.seed + index), perturbable(a), seed, index)
        a.fill("normal", None, vals)  # type: ignore[arg-type]
        layout = put(s.arena, a, 0)
        label = f"timed replay {keep + 1} of {k}, timing set {index + 1} of {n_used}"
        reply, _ = s.ask(Collect(layout=layout, index=index), case, label)
        if not reply.ok:
            raise s.fail(case, "protocol violation", f"{label}: the worker kept no outputs ({reply.error[:300]})")
        got = take(s.arena, layout, a)
        outputs = self._kept_outputs()
        for name in outputs:
            if not got.tensors[name].guards_intact():
                raise s.fail(case, "out of bounds write", f"{label}: {name} written outside its bounds", name)
        orig, ref = s.correctness.original(case, vals), s.reference_outs(case, vals)
        tol = s.manifest.tolerances[case.dtype]
        for name in outputs:
            m = compare(name, got.tensors[name].view, orig[name], ref.get(name), tol, ref.get(scale_key(name)),
                        ref.get(segments_key(name)))
            if m is not None:
                raise s.fail(case, "timed run wrong", f"{label}: {m.detail} (a timed replay did less than a "
                             "checked call)", name, m)

    def _warm_inplace(self) -> bool:
        """A warm replay applies an in-place op several times to one buffer: not one call's result."""
        return self.s.cfg.mode == "warm" and any(t.role == "inplace" for t in self.s.manifest.signature.tensors)

    def after_timing_check(self, case: CaseSpec, graph: bool) -> None:
        """The timed runs must compute the function: replay the timed graph on new values in the same buffers,
        then call the candidate eagerly on the same addresses with new values again."""
        s = self.s
        assert s.arena is not None
        steps = (("timed graph replay", True), ("eager call at the timed addresses", False))
        for k, (label, g) in enumerate(steps):
            if g and not graph:
                continue
            vals = s.values(case, case.seed + 104729 * (k + 1))
            a = ArgSet(s.manifest, case.dims, case.dtype, s.device, s.op_inputs)
            a.fill("normal", None, vals)  # type: ignore[arg-type]
            layout = put(s.arena, a, 0)
            reply, frames = s.ask(Recheck(layout=layout, graph=g), case, f"after timing ({label})")
            if not reply.ok:
                raise s.launch_error(case, reply, f"after timing ({label})")
            got = take(s.arena, layout, a)
            if g and s.by_value:
                continue  # outputs returned by value are not observable from a replay
            if g:
                s.correctness.memory_checks(case, got, vals, f"after timing ({label})")
                outs = {n: got.tensors[n].view for n in s.compared}
            else:
                outs = s.correctness.judge_call(case, got, vals, reply, frames, f"after timing ({label})")
            orig = s.correctness.original(case, vals)
            ref = s.reference_outs(case, vals)
            bad = s.check(case, outs, orig, ref)
            if bad is not None:
                reason = "timed run wrong" if g else "stateful"
                raise s.fail(case, reason, f"after timing, {label} with new values: {bad[1].detail}"
                             + (" (the captured graph does not compute the function: work hidden from the "
                                "capture stream or skipped)" if g else ""), bad[0], bad[1])

    def _timed_original(self, case: CaseSpec) -> tuple[Launcher, str | None]:
        """What the candidate is timed against: the original, or where it refuses the shape the kernel SGLang
        serves there (its name second); Skip when neither runs."""
        s = self.s
        try:
            s.correctness.original(case, s.values(case, case.seed), served_fallback=False)
            return s.orig_launcher(case.dtype), None
        except Skip:
            served = s.baselines.served_launcher(case.dims, case.dtype, same_function=True)  # checkable there
            if served is None:
                raise
            a = ArgSet(s.manifest, case.dims, case.dtype, s.device, s.op_inputs)
            a.fill("normal", torch.Generator(device=s.device).manual_seed(case.seed))
            try:
                served[1](a.args())
                s.clock.sync()
            except Exception as e:  # noqa: BLE001
                collect_launch_error(s.device)
                if poisons_context(e):
                    raise
                raise Skip(f"neither the original nor {served[0].name} runs {case.dims} {case.dtype}") from None
            return served[1], served[0].name

