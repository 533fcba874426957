"""The judge's side of a sweep: every variant of one candidate checked, then the survivors timed, in one worker.

A sweep job (``CheckJob.variants``) carries the variant sources and a small quick case set. The checker is the
ordinary ``Checker`` (the same comparisons, guards, return-value contract and tripwire); the worker holds
every variant and runs the one the last ``Use`` named. Each variant runs the quick cases; a variant that
fails one is dropped with that failure and never timed (a sweep of the original's own configs,
``refusals_per_shape``: a case the GPU refuses to launch the variant at is skipped and named instead, see
``_refusal``). Survivors are timed at every timed shape against the
original exactly as ``time_shape`` times a candidate (ABBA batches, CUDA graphs, cold-L2 rotation, the
after-timing re-check of the graph on new values), except the wall-clock cross-check: the chosen config is
frozen and then evaluated again in full with it (``sweep.py``), so a forged sweep time can choose a config
but never make a claim. For the same reason a sweep's timing (``JudgeSession.screening``) also skips what only guards a
claim and costs most per shape: the wait for NVML to see the stopped worker's GPU queue drained before each window
of the original (one sample period and more, three times per shape), the check of a kept timed replay's outputs and
the after-timing re-checks (new input values, the original and the float64 reference each time). A config that
cheats there is chosen at worst, and its frozen source fails the full evaluation. A variant that kills or poisons its
worker gets a fresh one for the rest.
"""

from __future__ import annotations

from collections.abc import Callable

from astra_sglang.contract.result import CorrectnessReport, FailedCase
from astra_sglang.harness.judge.checker import Checker
from astra_sglang.harness.judge.session import LAUNCH_REFUSED, CaseFailure, Skip
from astra_sglang.harness.shared.arena import Arena
from astra_sglang.harness.shared.isolation import Child
from astra_sglang.harness.shared.protocol import (
    CheckJob,
    CheckResult,
    Load,
    Progress,
    Use,
    VariantOutcome,
    Verify,
)


class SweepChecker:
    def __init__(self, job: CheckJob, progress: Callable[[Progress], None], worker: Child,
                 start_worker: Callable[[], Child], arena: Arena):
        self.job = job
        self.progress = progress
        self.start_worker = start_worker
        self.checker = Checker(job, progress, worker, arena)
        self.checker.s.screening = True

    def close(self) -> None:
        if self.checker.s.worker is not None:
            self.checker.s.worker.close()

    def _fresh_worker(self) -> None:
        self.checker.s.new_worker(self.start_worker)

    def _use(self, i: int, dtypes: list[str]) -> FailedCase | None:
        """Switch the worker to variant i and import it: its failure to load, or None."""
        c = self.checker.s
        c.candidate = self.job.variants[i]
        c.ask(Use(index=i), None, "variant switch")
        reply, _ = c.ask(Load(dtypes=dtypes), None, "candidate import")
        if not reply.ok:
            return FailedCase(reason="build failed", detail=reply.error[:2000])
        c.tampered(reply.tampered, "right after the variant was imported")
        return None

    def _refusal(self, f: CaseFailure) -> bool:
        """Whether ``f`` is the GPU refusing the variant's launch at this shape (Triton's OutOfResources, CUDA's
        too-many-resources), in a sweep that lets a config serve only where it launches. SGLang's own tuning
        (tuning_fused_moe_triton.py) picks per batch size among the configs that run there; requiring every
        check shape dropped 28 of 96 fused-MoE configs on the H200 for the shared memory of an E=8, BM-64 case,
        8 of which fit at Qwen3's decode shapes and never competed there (2026-12-06). Only the trusted sweep of
        the original's own source sets it (tune_baseline.py): a candidate's sweep still drops a config at its
        first refusal, so no candidate can skip a case by raising."""
        d = f.failure.detail
        return (self.job.refusals_per_shape and f.failure.reason == "launch error" and not f.sticky
                and ("OutOfResources" in d or "out of resource" in d or any(r in d for r in LAUNCH_REFUSED)))

    def _guarded(self, step: Callable[[], FailedCase | None]) -> FailedCase | None:
        try:
            return step()
        except CaseFailure as f:
            if f.sticky or f.failure.reason in ("crash", "timeout", "protocol violation"):
                self._fresh_worker()
            return f.failure

    def run(self) -> CheckResult:
        out = CheckResult(device="cpu (TRITON_INTERPRET=1)", notes=self.checker.s.notes, sweep=[])
        try:
            return self._run(out)
        finally:
            out.sandbox = self.checker.s.sandbox

    def _run(self, out: CheckResult) -> CheckResult:
        c, job = self.checker.s, self.job
        dtypes = sorted({x.dtype for x in job.cases} | set(job.timing_dtypes))
        for dt in sorted({x.dtype for x in job.cases}):
            c.orig_launcher(dt)
        if c.timed:
            out.device = c.clock.device_name()
            self.progress(Progress(step="warm-up"))
            c.clock.warm(c.cfg.gpu_warmup_s)
            out.ceiling = job.ceiling or c.clock.copy_ceiling_gbps()
        outcomes: list[VariantOutcome] = []
        n = len(job.variants)
        for i in range(n):
            self.progress(Progress(step=f"quick check of config {i + 1}/{n}", index=i))

            refused: list[FailedCase] = []

            def quick(i: int = i, refused: list[FailedCase] = refused) -> FailedCase | None:
                failed = self._use(i, dtypes)
                if failed is not None:
                    return failed
                for case in job.cases:
                    try:
                        c.correctness.check_case(case)
                    except Skip:
                        continue
                    except CaseFailure as f:
                        if not self._refusal(f):
                            raise
                        refused.append(f.failure)
                reply, _ = c.ask(Verify(), None, "tripwire")
                c.tampered(reply.tampered, "after the quick check")
                if refused and len(refused) == len(job.cases):  # launched nowhere: nothing of it was checked
                    return refused[0]
                return None

            outcomes.append(VariantOutcome(index=i, failure=self._guarded(quick), refused=refused))
        out.sweep = outcomes
        out.correctness = CorrectnessReport(ok=any(o.failure is None for o in outcomes), cases_run=len(job.cases))
        if not c.timed or not c.cfg.timing:
            return out
        assert out.ceiling is not None
        ceiling, l2 = out.ceiling, c.clock.l2_bytes()
        for o in outcomes:
            if o.failure is not None:
                continue

            def timed(o: VariantOutcome = o) -> FailedCase | None:
                failed = self._use(o.index, dtypes)
                if failed is not None:
                    return failed
                for dims in job.timed_shapes:
                    for dt in job.timing_dtypes:
                        self.progress(Progress(step=f"time config {o.index + 1}/{n}", dims=dims, dtype=dt))
                        try:
                            o.timing.append(c.timer.time_shape(dims, dt, ceiling, l2, wall_check=False))
                        except Skip as s:
                            if len(c.notes) < 20:
                                c.notes.append(f"not timed: {s}")
                        except CaseFailure as f:
                            if not self._refusal(f):
                                raise
                            o.refused.append(f.failure)
                if not o.timing and o.refused:  # refused at every timed shape: nothing to compete with
                    return o.refused[-1]
                return None

            o.failure = self._guarded(timed)
            if o.failure is not None:
                o.timing = []
        return out
