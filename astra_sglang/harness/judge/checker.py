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

from collections.abc import Callable

from astra_sglang.contract.result import FailedCase
from astra_sglang.harness.judge.baselines import Baselines
from astra_sglang.harness.judge.correctness import Correctness
from astra_sglang.harness.judge.session import CaseFailure, JudgeSession
from astra_sglang.harness.judge.timed import ShapeTimer
from astra_sglang.harness.shared.arena import Arena
from astra_sglang.harness.shared.isolation import Child
from astra_sglang.harness.shared.protocol import (
    CheckJob,
    CheckResult,
    Load,
    Progress,
)


class Checker:
    """One candidate's verdict (or the original's validation): correctness over the suite, then the timed shapes."""

    def __init__(self, job: CheckJob, progress: Callable[[Progress], None], worker: Child | None,
                 arena: Arena | None, start_worker: Callable[[], Child] | None = None):
        """``start_worker`` starts a fresh worker for the candidate (the judge's): where given, a worker that died
        or hung on a case the original refuses is replaced and the case skipped (``Correctness._outside_domain``)."""
        self.s = JudgeSession(job, progress, worker, arena, start_worker)
        self.s.baselines = Baselines(self.s)
        self.s.correctness = Correctness(self.s)
        self.s.timer = ShapeTimer(self.s)

    def run(self) -> CheckResult:
        out = CheckResult(device="cpu (TRITON_INTERPRET=1)")
        try:
            return self._run(out)
        finally:  # the model copies lists it is given: notes added after construction would be lost
            out.notes = list(self.s.notes)
            out.sandbox = self.s.sandbox

    def _run(self, out: CheckResult) -> CheckResult:
        s = self.s
        cases = s.job.cases
        dtypes = sorted({c.dtype for c in cases} | set(s.job.timing_dtypes))
        s.correctness._load_dtypes = dtypes
        for dt in sorted({c.dtype for c in cases}):
            s.orig_launcher(dt)
        failure: FailedCase | None = None
        if s.candidate is not None:
            s.progress(Progress(step="load"))
            try:
                reply, _ = s.ask(Load(dtypes=dtypes), None, "candidate import")
                if not reply.ok:  # a candidate that does not load/import failed to build
                    out.build_error = reply.error
                    return out
                s.tampered(reply.tampered, "right after the candidate was imported")
            except CaseFailure as f:
                failure = f.failure
        if s.timed:
            out.device = s.clock.device_name()
            s.progress(Progress(step="warm-up"))
            s.clock.warm(s.cfg.gpu_warmup_s)
            out.ceiling = s.job.ceiling or s.clock.copy_ceiling_gbps()
        out.correctness = s.correctness.run_suite(cases, failure)
        failure = out.correctness.first_failure
        # the original alone off its reference is a finding about the extraction: report it, still time it
        finding = s.candidate is None and failure is not None and failure.reason == "reference mismatch"
        if (failure is not None and not finding) or not s.timed or not s.cfg.timing:
            return out
        assert out.ceiling is not None
        try:
            shapes = s.timer.time_all(out.ceiling)
        except CaseFailure as f:
            out.correctness = out.correctness.model_copy(update={"ok": False, "first_failure": f.failure})
            return out
        out.timing = shapes
        return out
