"""Correctness: per case the candidate runs first, on fresh guarded buffers with NaN-poisoned outputs, before the
original has computed that case; it runs again after, at new addresses; what it leaves in the arena is copied out
before it is looked at, and its return value is checked against the op contract. Same buffers with new values
catch a result kept from an earlier call (``stateful_check``).
"""

from __future__ import annotations

import math

import torch

from astra_sglang.checker import (
    Mismatch,
    bits,
    compare_to_reference,
    scale_key,
    segments_key,
    tolerance_used,
)
from astra_sglang.contract.result import CorrectnessReport, FailedCase
from astra_sglang.errors import AstraError
from astra_sglang.harness.judge.session import (
    CaseFailure,
    JudgeSession,
    Skip,
    collect_launch_error,
    poisons_context,
)
from astra_sglang.harness.shared.arena import put, take
from astra_sglang.harness.shared.protocol import (
    CaseSpec,
    Load,
    Progress,
    Reply,
    Returned,
    ReturnValue,
    Run,
    Verify,
)
from astra_sglang.harness.shared.tensors import ArgSet


class Correctness:
    def __init__(self, session: JudgeSession):
        self.s = session
        self.skipped = 0
        self.died_outside_domain = 0  # cases skipped where the worker died or hung and the original refuses too
        self._load_dtypes: list[str] = []
        self.reference_error: dict[str, tuple[float, float]] = {}

    def original(self, case: CaseSpec, vals: dict[str, torch.Tensor],
                 served_fallback: bool = True) -> dict[str, torch.Tensor]:
        """The original's outputs; where it refuses the case, a candidate is held against the same-function
        kernel SGLang serves there (``_served_run``), else the case is skipped."""
        s = self.s
        a = ArgSet(s.manifest, case.dims, case.dtype, s.device, s.op_inputs)
        a.fill(case.distribution, None, vals)  # type: ignore[arg-type]
        try:
            ret = s.orig_launcher(case.dtype, case.call)(a.args())
            s.clock.sync()
            outs = s.outs(ret, a, case.call)
        except AstraError:
            raise
        except Exception as e:  # noqa: BLE001
            collect_launch_error(s.device)  # a refusal the launch raised leaves CUDA's flag set too
            if poisons_context(e):
                raise
            # served kernels are called as the recipe calls the original: no stand-in for another call form
            served_fallback = served_fallback and case.call is None
            served = s.baselines.served_run(case, vals) if served_fallback and s.candidate is not None else None
            if served is not None:
                return served
            raise Skip(f"original refuses {case.dims} {case.dtype}: {str(e)[:300]}") from None
        return {n: t.clone() for n, t in outs.items()}

    def _returned(self, case: CaseSpec, value: ReturnValue | None, frames: list[torch.Tensor],
                  label: str) -> dict[str, torch.Tensor]:
        """Outputs the candidate returned by value; a return that breaks the op contract fails the case."""
        s = self.s
        value = value or ReturnValue(container="none")
        passed, by_value = s.passing(case.call)
        tensors = iter(frames)
        got: list[tuple[Returned, torch.Tensor | None]] = [
            (it, next(tensors) if it.kind == "tensor" else None) for it in value.items]
        want = s.manifest.signature.returns
        if want is None:  # unchecked: outputs not passed come back in order
            vals = [t for it, t in got if it.kind == "tensor" and t is not None]
            if len(vals) < len(by_value):
                raise s.fail(case, "wrong return value", f"{label}: returned {len(vals)} new tensor(s), the "
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
            raise s.fail(case, "wrong return value", f"{label}: the entry point returned {shown(value)}; the op "
                         f"contract says it returns {expect} (passed buffers as themselves)")
        return out

    def candidate_run(self, case: CaseSpec, vals: dict[str, torch.Tensor], label: str, base: int = 0,
                      finite_prefill: bool = False) -> tuple[ArgSet, dict[str, torch.Tensor]]:
        s = self.s
        assert s.arena is not None
        label += s.form(case)
        a = ArgSet(s.manifest, case.dims, case.dtype, s.device, s.op_inputs)
        a.fill(case.distribution, None, vals)  # type: ignore[arg-type]
        if finite_prefill:
            a.fill_outputs(finite=True)
        layout = put(s.arena, a, base)
        reply, frames = s.ask(Run(dtype=case.dtype, layout=layout, call=case.call), case, label)
        got = take(s.arena, layout, a)
        if not reply.ok:
            raise s.launch_error(case, reply, label)
        return got, self.judge_call(case, got, vals, reply, frames, label)

    def judge_call(self, case: CaseSpec, got: ArgSet, vals: dict[str, torch.Tensor], reply: Reply,
                   frames: list[torch.Tensor], label: str) -> dict[str, torch.Tensor]:
        """What one candidate call left in memory and returned: its outputs, or the case's failure."""
        self.memory_checks(case, got, vals, label)
        by_value = self.s.passing(case.call)[1]
        outs = {n: got.tensors[n].view for n in self.s.compared if n not in by_value}
        outs.update(self._returned(case, reply.returned, frames, label))
        return outs

    def memory_checks(self, case: CaseSpec, got: ArgSet, vals: dict[str, torch.Tensor], label: str) -> None:
        s = self.s
        for name, g in got.tensors.items():
            if not g.guards_intact():
                raise s.fail(case, "out-of-bounds write", f"{label}: memory next to {name!r} was written",
                             tensor=name)
        for name in s.inputs:
            if not torch.equal(bits(got.tensors[name].view), bits(vals[name])):
                raise s.fail(case, "input mutated", f"{label}: input {name!r} changed", tensor=name)

    def shift(self, case: CaseSpec, k: int) -> int:
        """A byte offset for the k-th placement of a case: new addresses in the worker."""
        from astra_sglang.harness.shared.arena import ALIGN

        return ALIGN * ((case.seed + 7 * k) % 5 + k) if k else 0

    def check_case(self, case: CaseSpec) -> None:
        s = self.s
        vals = s.values(case, case.seed)
        if s.candidate is None:
            orig = self.original(case, vals)
            ref = s.reference_outs(case, vals)
            for name in s.compared:
                if name in ref:
                    tol = s.manifest.tolerances[case.dtype]
                    side = (ref.get(scale_key(name)), ref.get(segments_key(name)))
                    m = compare_to_reference(name, orig[name], ref[name], tol, *side)
                    if m is not None:
                        raise s.fail(case, m.reason, f"original: {m.detail}", name, m)
                    used = tolerance_used(orig[name], ref[name], tol, *side)
                    seen = self.reference_error.get(name, (0.0, 0.0))
                    self.reference_error[name] = (max(seen[0], used[0]), max(seen[1], used[1]))
            return
        try:
            _, first = self.candidate_run(case, vals, "first run (before the original)")
        except CaseFailure as f:
            self._outside_domain(case, vals, f)
            raise
        orig = self.original(case, vals)
        _, second = self.candidate_run(case, vals, "second run (after the original, new addresses)",
                                       base=self.shift(case, 1))
        ref = s.reference_outs(case, vals)
        for label, outs in (("first run", first), ("second run", second)):
            label += s.form(case)
            bad = s.check(case, outs, orig, ref)
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
        if died and self.s.start_worker is None:
            return
        try:
            self.original(case, vals, served_fallback=False)
        except Skip as skip:
            if not died:
                raise
            self._fresh_worker()
            self.died_outside_domain += 1
            raise Skip(f"{skip}; the candidate's worker died there too ({f.failure.reason}): skipped") from None

    def _fresh_worker(self) -> None:
        """Replace a dead or hung worker (its whole process group killed) by a fresh one with the candidate loaded
        and the tripwire read, as at the start."""
        s = self.s
        assert s.start_worker is not None
        s.new_worker(s.start_worker)
        reply, _ = s.ask(Load(dtypes=self._load_dtypes), None, "candidate import (fresh worker)")
        if not reply.ok:
            raise CaseFailure(FailedCase(reason="crash", detail="the candidate no longer imports in a fresh worker: "
                                         + reply.error[:2000]))
        s.tampered(reply.tampered, "right after the candidate was imported in a fresh worker")

    def _diagnose(self, case: CaseSpec, vals: dict[str, torch.Tensor], orig: dict[str, torch.Tensor],
                  ref: dict[str, torch.Tensor], label: str, name: str, m: Mismatch) -> CaseFailure:
        """Name the cause: history-dependent (stateful), never-written, or NaN from reading the output buffer."""
        s = self.s
        _, again = self.candidate_run(case, vals, "diagnostic re-run (new addresses)", base=self.shift(case, 2))
        if s.check(case, again, orig, ref) is None:
            return s.fail(case, "stateful", f"{label}: {m.detail}; the same inputs at new addresses give the "
                          "right answer: the output depends on earlier calls or on addresses (state kept "
                          "between calls) or is nondeterministic", name, m)
        if m.reason in ("nan", "unwritten output"):
            _, fin = self.candidate_run(case, vals, "diagnostic re-run (finite prefill)", finite_prefill=True)
            out = fin[name]
            if out.dtype.is_floating_point and bool(((out == 1234.5) & (orig[name] != 1234.5)).any()):
                return s.fail(case, "unwritten output", f"{label}: {m.detail}; with a finite prefill those "
                              "elements keep the prefill: never written", name, m)
            return s.fail(case, "nan", f"{label}: {m.detail}", name, m)
        return s.fail(case, m.reason, f"{label}: {m.detail}", name, m)

    def stateful_check(self, case: CaseSpec) -> None:
        """Same buffers, new values: a result cached by pointer (or by anything but the data) shows up here."""
        s = self.s
        base = self.shift(case, 3)
        for k in range(2):
            vals = s.values(case, case.seed + 7919 * (k + 1))
            try:
                _, outs = self.candidate_run(case, vals, "same-address re-run", base=base)
            except CaseFailure as f:
                self._outside_domain(case, vals, f)
                raise
            orig = self.original(case, vals)
            ref = s.reference_outs(case, vals)
            bad = s.check(case, outs, orig, ref)
            if bad is not None and k > 0:
                raise s.fail(case, "stateful", f"same input addresses, new values: {bad[1].detail} (the "
                             "candidate returns a result kept from an earlier call)", bad[0], bad[1])
            if bad is not None:
                raise s.fail(case, bad[1].reason, bad[1].detail, bad[0], bad[1])

    def run_suite(self, cases: list[CaseSpec], failure: FailedCase | None) -> CorrectnessReport:
        """Every case of the suite, then (for a candidate) the same-address re-runs with new values and the
        tripwire; the first failure ends it. ``failure``: one found before (at import), reported as it is."""
        s = self.s
        run = heldout = 0
        try:
            if failure is not None:
                raise CaseFailure(failure)
            for i, case in enumerate(cases):
                s.progress(Progress(step="check", index=i, heldout=case.heldout,
                                    case=None if case.heldout else case))
                try:
                    self.check_case(case)
                except Skip as skip:
                    self.skipped += 1
                    if len(s.notes) < 20 and not case.heldout:
                        s.notes.append(str(skip))
                    continue
                run += 1
                heldout += int(case.heldout)
            if self.died_outside_domain:
                s.notes.append(f"{self.died_outside_domain} case(s) skipped where the candidate's worker crashed "
                               "or hung and the original refuses the case too (outside the op's domain)")
            if s.candidate is not None:
                visible = sorted((c for c in cases if not c.heldout and c.distribution == "normal"
                                  and c.call is None),
                                 key=lambda c: math.prod(c.dims.values()))
                for case in visible[: s.cfg.stateful_checks]:
                    s.progress(Progress(step="stateful", case=case))
                    try:
                        self.stateful_check(case)
                    except Skip:
                        continue
                reply, _ = s.ask(Verify(), None, "tripwire")
                s.tampered(reply.tampered, "after the correctness runs")
        except CaseFailure as f:
            failure = f.failure
        return CorrectnessReport(ok=failure is None, cases_run=run, heldout_cases_run=heldout,
                                 first_failure=failure, skipped_cases=self.skipped,
                                 reference_error=dict(self.reference_error))
