"""Astra's Algorithm 1 on the openai-agents SDK: test suite, then R rounds of profile, plan, code, check, time.

Round 0 measures the original. Each round i starts from the best correct kernel so far (the original in
round 1), and every step's output is a checkpoint in the run folder, so a killed run resumes at the step
that was in flight. A round whose model calls keep failing is recorded as failed and the run goes on; only
a setup problem (the original failing its own evaluation, rejected credentials) stops the run.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

from agents import RunConfig, Runner
from agents.exceptions import ModelBehaviorError

from astra_sglang import platform_info
from astra_sglang.agents.config import TokenCount
from astra_sglang.agents.recording import ModelAuthFailed, RecordingModel, jsonable, short_error
from astra_sglang.agents.run_context import AgentContext
from astra_sglang.agents.schemas import (
    CandidateSource,
    CodingInput,
    Diagnosis,
    OptimizationPlan,
    PlanningInput,
    PlanningSetInput,
    PlanSet,
    ProfilingInput,
    SingleAgentInput,
    SingleAgentRound,
    SingleAgentSetInput,
    SuiteInput,
    SuiteProposal,
    render_input,
)
from astra_sglang.agents.team import make_team
from astra_sglang.agents.tools import make_tools
from astra_sglang.agents.usage import RunUsage, token_count
from astra_sglang.contract.base import sha256_text
from astra_sglang.contract.op import Manifest
from astra_sglang.contract.result import EvalResult
from astra_sglang.errors import AstraError
from astra_sglang.loop import agent_views as views
from astra_sglang.loop.evaluator import EvalPending, Evaluator
from astra_sglang.loop.plans import distinct_plans
from astra_sglang.loop.records import (
    NOT_RETIMED,
    CheckReport,
    CodeAttempt,
    CodeOutcome,
    DiagnosisStep,
    EvalSpec,
    PlanSetStep,
    PlanStep,
    Retime,
    RoundRecord,
    RunMeta,
    StepRecord,
    SuiteStep,
    TranscriptEntry,
    TuneOutcome,
    WinnerInfo,
)
from astra_sglang.loop.runfolder import RunFolder, atomic_write, now_iso
from astra_sglang.loop.static_check import candidate_suffix, original_source_path, seed_name
from astra_sglang.loop.stopping import stop_reason
from astra_sglang.loop.view import LiveView
from astra_sglang.loop.winner import (
    contenders,
    flat,
    gpu_of,
    mixed_gpus_note,
    pick_base,
    ranked,
    ranking_gpu,
    round_best,
)


class Optimizer:
    def __init__(self, folder: RunFolder, meta: RunMeta, manifest: Manifest, op_dir: Path, evaluator: Evaluator,
                 model: RecordingModel, view: LiveView) -> None:
        self.folder = folder
        self.meta = meta
        self.opts = meta.options
        self.manifest = manifest
        self.op_dir = Path(op_dir)
        self.evaluator = evaluator
        self.model = model
        self.view = view
        self.k = self.opts.candidates
        self.team = make_team(model, make_tools(self, ncu=self.opts.ncu), self.opts.single_agent, self.k)
        self.op = views.op_view(manifest)
        self.suffix = candidate_suffix(manifest)
        self.original = original_source_path(self.op_dir, manifest)
        self.run_config = RunConfig(tracing_disabled=not self.opts.model.trace,
                                    workflow_name=f"astra optimize {manifest.short_name}")
        self.spec: EvalSpec = self.opts.eval
        self.base: RoundRecord | None = None
        self._checks = 0
        self._checks_lock = threading.Lock()

    # ================================================================================== the algorithm
    async def run(self) -> WinnerInfo:
        suite = await self.suite_step()
        self.spec = self.opts.eval.model_copy(update={"suite": suite.accepted if suite.used_by_harness else []})
        await self.round_zero()
        self._sweep_filled(final=False)
        self.meta.stop_reason = None  # a resumed run with more rounds judges again
        for i in range(1, self.opts.rounds + 1):
            if self.folder.record(i) is not None:
                continue  # finished before a kill/stop: never repeated
            stop = stop_reason(self.folder.records(), self.opts.patience, self.opts.stop_at_bound_margin)
            if stop is not None:
                self.meta.stop_reason = f"stopped before round {i}: {stop}"
                self.view.event(self.meta.stop_reason)
                break
            record = await self.one_round(i)
            self.folder.finish_round(record)
            self.view.round_done(record)
        self._sweep_filled(final=True)
        return await self.choose_winner()

    # --------------------------------------------------------------------------------------- round 0
    async def suite_step(self) -> SuiteStep:
        cached = self.folder.load_step(0, "suite", SuiteStep)
        if cached is not None:
            return self._suite_under_contract(cached)
        agent = self.team.testing
        transcript: list[TranscriptEntry] = []
        try:
            result = await self.run_agent(0, "testing", agent, render_input(
                SuiteInput(op=self.op, kernel_source=self.original.read_text())))
            transcript.append(self._transcript(agent.name, "testing", 0, result))
            proposal: SuiteProposal = result.final_output
            max_elems = 4096 if self.spec.shapes == "test" else 1 << 24
            accepted, rejected = views.validate_suite(proposal.cases, self.manifest, max_elems)
            step = SuiteStep(proposal=proposal, accepted=accepted, rejected=rejected, used_by_harness=True,
                             note=f"{len(accepted)} proposed case(s) added to the harness's suite",
                             transcript=transcript)
        except ModelAuthFailed as e:
            raise AstraError(str(e)) from None
        except Exception as e:  # transport, model or tool failure: it ends the round, not the run
            step = SuiteStep(note=f"testing agent failed ({short_error(e)}); the harness's own suite is used",
                             transcript=transcript)
        self.folder.save_step(0, "suite", step)
        self.view.event(f"test suite: {step.note}")
        return step

    def _suite_under_contract(self, step: SuiteStep) -> SuiteStep:
        """A resumed run's suite held against today's contract: a case the op contract no longer allows (its
        domain narrowed after the suite was proposed, e.g. decode_attention's G <= 16 once a proposed G = 17
        showed SGLang's kernel wrong there) is dropped and said, never run against the original."""
        if not step.accepted:
            return step
        max_elems = 4096 if self.spec.shapes == "test" else 1 << 24
        kept, dropped = views.validate_suite(step.accepted, self.manifest, max_elems)
        if not dropped:
            return step
        note = f"{len(dropped)} proposed case(s) dropped on resume: outside the op contract now"
        step = step.model_copy(update={"accepted": kept, "rejected": [*step.rejected, *dropped],
                                       "note": f"{step.note}; {note}"})
        self.folder.save_step(0, "suite", step)
        self.view.event(f"test suite: {note} ({'; '.join(dropped)[:300]})")
        return step

    async def round_zero(self) -> RoundRecord:
        done = self.folder.record(0)
        if done is not None:
            return done
        self.view.update(0, "harness", "measuring the original")
        try:
            result = self.evaluate(0, "r000-original", None)
        except EvalPending as e:  # queue the sweep baseline in the same trip to the GPU host
            try:
                self.sweep_baseline_step()
            except EvalPending as t:
                raise EvalPending(e.queue_dir, e.items + t.items) from None
            raise
        tune = self._sweep_or_pending() if result.ok else None
        record = RoundRecord(round=0, status="ok" if result.ok else "failed", source=self.original.read_text(),
                             candidate_sha256=sha256_text(self.original.read_text()), correct=result.ok,
                             first_failure=views.failure_text(result) if not result.ok else None,
                             geomean_speedup=result.geomean_speedup, timing_source=_timing_source(result),
                             times=views.shape_times(result), wall_s=result.wall_s, label=self.opts.label,
                             changes="the original SGLang kernel", sweep_baseline=tune)
        self.folder.finish_round(record)
        self.view.round_done(record)
        if not result.ok:
            raise AstraError(f"the original kernel failed its own evaluation ({views.failure_text(result)}); "
                             f"nothing to optimize against; see {self.folder.step_path(0, 'result')}")
        return record

    def _sweep_or_pending(self) -> TuneOutcome:
        """The sweep baseline, or, while its queue item waits, a note that it does: the sweep is the bar the
        winner is shown against, not an input of any round, and it can take longer on the GPU host than a round's
        candidates (fused_moe: 96 configs x 20 decode shapes), so the rounds do not wait for it."""
        try:
            return self.sweep_baseline_step()
        except EvalPending as e:
            self.view.event(f"sweep baseline: queued ({', '.join(e.items)}); the rounds go on without waiting for it")
            return TuneOutcome(error="sweep baseline not answered yet by the GPU host (queued)", pending=e.items)

    def _sweep_filled(self, final: bool) -> None:
        """Round 0's pending sweep baseline, filled in once the queue has answered it. Before the winner is chosen
        (``final``) a still-pending sweep stops the run as waiting (exit 3): the winner is never reported without
        the bar beside it."""
        r0 = self.folder.record(0)
        if r0 is None or r0.sweep_baseline is None or not r0.sweep_baseline.pending:
            return
        try:
            outcome = self.sweep_baseline_step()
        except EvalPending:
            if final:
                raise
            return
        self.folder.save_step(0, "record", r0.model_copy(update={"sweep_baseline": outcome}))

    def sweep_baseline_step(self) -> TuneOutcome:
        """The original with its own launch parameters retuned per shape (``astra-sglang tune``), measured
        through this run's evaluator (the queue too): the bar a winner must beat after the original."""
        cached = self.folder.load_step(0, "tune", TuneOutcome)
        if cached is not None:
            return cached
        self.view.update(0, "harness", "sweeping the original's launch parameters")
        outcome = self.evaluator.sweep_baseline(self.spec)
        self.folder.save_step(0, "tune", outcome)
        geo = outcome.baseline.geomean_speedup if outcome.baseline else None
        self.view.event(f"sweep baseline: {geo:.3f}x over the original" if geo else
                        f"sweep baseline: {outcome.error or 'no timed shapes (checks only on this device)'}")
        return outcome

    # ----------------------------------------------------------------------------------- round 1..R
    async def one_round(self, i: int) -> RoundRecord:
        """Round i from the best correct kernel so far: one candidate (the paper's loop) or K at once."""
        records = [r for r in self.folder.records() if r.round < i]
        base = pick_base(flat(records))
        self.base = base
        if i == 1 and self.opts.seed_kernel:
            return self.seed_round(i, base, records)
        if self.k > 1:
            return await self.k_round(i, base, records)
        base_result = self.result_of(base.round, base.candidate)
        base_source = views.source_of(base, self.original)
        diag: DiagnosisStep | None = None
        plan: PlanStep | None = None
        code: CodeOutcome | None = None
        record = RoundRecord(round=i, status="failed", base_round=base.round, label=self.opts.label)
        try:
            if self.team.single:
                code = await self.single_step(i, base, base_source, base_result, records)
            else:
                diag = await self.profile_step(i, base, base_source, base_result)
                plan = await self.plan_step(i, base, base_source, base_result, diag.diagnosis, records)
                code = await self.code_step(i, base_source, plan.plan)
        except (EvalPending, ModelAuthFailed):
            raise
        except Exception as e:  # transport, model or tool failure: it ends the round, not the run
            record.error = f"{short_error(e)}"
            self._note_trace(i, e)
        if diag is not None:
            record.diagnosis = diag.diagnosis
        if plan is not None:
            record.plan = plan.plan
            record.suggestions = plan.plan.suggestions
        if code is not None:
            path = self._take_code(record, code)
            if path is not None:
                try:
                    results, record.retimes = self.evaluate_round(i, [(None, f"r{i:03d}", path)], base, records)
                    self._take_result(record, results[0])
                except AstraError as e:  # the harness could not judge this candidate: the round fails
                    record.error = f"evaluation failed: {e}"
        record.transcript = [t for step in (diag, plan, code) if step is not None for t in step.transcript]
        record.tokens, record.wall_s = self._cost(i)
        return record

    def seed_round(self, i: int, base: RoundRecord, records: list[RoundRecord]) -> RoundRecord:
        """Round 1 of a seeded run: the seed (an earlier run's winner, copied into the run folder when it started)
        is judged like any candidate, and no model is asked; the rounds after it start from it if it is the best
        correct kernel. Its record says where it came from, so no table credits this run with it."""
        name = seed_name(self.manifest)
        path = self.folder.path / name
        source = path.read_text()
        record = RoundRecord(round=i, status="failed", base_round=base.round, label=self.opts.label, source=source,
                             candidate_file=name, candidate_sha256=sha256_text(source), seed=self.opts.seed_kernel,
                             changes=f"the seed kernel ({self.opts.seed_kernel}): not written by this run")
        try:
            results, record.retimes = self.evaluate_round(i, [(None, f"r{i:03d}", path)], base, records)
            self._take_result(record, results[0])
        except AstraError as e:
            record.error = f"evaluation failed: {e}"
        record.tokens, record.wall_s = self._cost(i)
        return record

    async def k_round(self, i: int, base: RoundRecord, records: list[RoundRecord]) -> RoundRecord:
        """K distinct plans, K coding agents at once (each its own steps, checkpoints and call records), the K
        candidates judged in one evaluation; the round's line is its best candidate, with all K listed."""
        base_result = self.result_of(base.round, base.candidate)
        base_source = views.source_of(base, self.original)
        head = RoundRecord(round=i, status="failed", base_round=base.round, base_candidate=base.candidate,
                           label=self.opts.label)
        diag: DiagnosisStep | None = None
        plans: PlanSetStep | None = None
        codes: list[CodeOutcome | BaseException] = []
        try:
            if self.team.single:
                history = views.candidate_history(flat(records))
                inputs = [render_input(SingleAgentSetInput(
                    op=self.op, round=i, rounds_total=self.opts.rounds, kernel_round=base.round,
                    kernel_source=base_source, result=views.result_view(base_result), history=history, candidate=j,
                    candidates_in_round=self.k)) for j in range(self.k)]
                step = "single"
            else:
                diag = await self.profile_step(i, base, base_source, base_result)
                plans = await self.plan_set_step(i, base, base_source, base_result, diag.diagnosis, records)
                inputs = [render_input(CodingInput(op=self.op, round=i, kernel_source=base_source, plan=p))
                          for p in plans.plans]
                step = "coding"
            codes = list(await asyncio.gather(*(self._code_with_fixes(i, step, text, j)
                                                for j, text in enumerate(inputs)), return_exceptions=True))
        except (EvalPending, ModelAuthFailed):
            raise
        except Exception as e:  # transport, model or tool failure: it ends the round, not the run
            head.error = short_error(e)
            self._note_trace(i, e)
        for code in codes:  # a rejected key or Ctrl-C in one agent ends the run, not just its candidate
            if isinstance(code, ModelAuthFailed) or (isinstance(code, BaseException)
                                                     and not isinstance(code, Exception)):
                raise code
        candidates: list[RoundRecord] = []
        judge: list[tuple[int, Path]] = []
        for j, code in enumerate(codes):
            rec = RoundRecord(round=i, candidate=j, status="failed", base_round=base.round,
                              base_candidate=base.candidate, label=self.opts.label)
            if diag is not None:
                rec.diagnosis = diag.diagnosis
            if plans is not None:
                rec.plan, rec.suggestions = plans.plans[j], plans.plans[j].suggestions
            if isinstance(code, BaseException):
                rec.error = short_error(code)
                self._note_trace(i, code, j)
            else:
                rec.transcript = code.transcript
                path = self._take_code(rec, code)
                if path is not None:
                    judge.append((j, path))
            candidates.append(rec)
        if judge:
            try:
                results, retimes = self.evaluate_round(i, [(j, f"r{i:03d}-c{j}", path) for j, path in judge],
                                                       base, records)
                for (j, _), result in zip(judge, results):
                    self._take_result(candidates[j], result)
                for rec in candidates:
                    rec.retimes = retimes
            except AstraError as e:  # the harness could not judge the batch: those candidates fail
                for j, _ in judge:
                    candidates[j].error = f"evaluation failed: {e}"
        for rec in candidates:
            rec.tokens, rec.wall_s = self._cost(i, rec.candidate)
        record = head
        if candidates:
            best = round_best(candidates)
            record = best.model_copy(update={"transcript": [], "error": head.error or best.error})
        record.candidates = candidates
        record.plan_note = plans.note if plans is not None else None
        record.transcript = [t for step in (diag, plans) if step is not None for t in step.transcript]
        record.tokens, record.wall_s = self._cost(i)
        if candidates:
            self.view.event(f"round {i}: " + ", ".join(f"c{c.candidate} {c.status}"
                                                       + (f" {c.geomean_speedup:.3f}x" if c.geomean_speedup else "")
                                                       for c in candidates))
        return record

    def _take_code(self, record: RoundRecord, code: CodeOutcome) -> Path | None:
        """The coding step's outcome into the record; the candidate to evaluate, None when there is none."""
        record.error = record.error or code.error
        record.diagnosis_text = code.diagnosis_text
        record.changes = code.changes
        record.source = code.source
        record.candidate_file = code.source_file
        record.candidate_sha256 = sha256_text(code.source) if code.source else None
        record.fix_attempts = max(0, len(code.attempts) - 1)
        if code.source_file is None:
            record.status, record.error = "failed", record.error or "no usable candidate in the model's replies"
            return None
        if not code.built:
            last = code.attempts[-1].check if code.attempts else None
            record.status = "build_failed"
            record.first_failure = (last.log if last else "build failed")[-2000:]
            return None
        return self.folder.path / code.source_file

    @staticmethod
    def _take_result(record: RoundRecord, result: EvalResult) -> None:
        record.correct = result.ok
        record.status = "ok" if result.ok else ("build_failed" if not result.build.ok else "incorrect")
        record.first_failure = views.failure_text(result) if not result.ok else None
        record.geomean_speedup = result.geomean_speedup
        record.timing_source = _timing_source(result)
        record.timing_suspect = list(result.timing.suspect) if result.timing else []
        record.times = views.shape_times(result)

    # ------------------------------------------------------------------------------------- the steps
    async def profile_step(self, i: int, base: RoundRecord, source: str, result: EvalResult) -> DiagnosisStep:
        cached = self.folder.load_step(i, "diagnosis", DiagnosisStep)
        if cached is not None:
            return cached
        sha = sha256_text(source)
        for j in range(i - 1, 0, -1):  # same base as an earlier round: its diagnosis still holds
            earlier = self.folder.load_step(j, "diagnosis", DiagnosisStep)
            if earlier is not None and earlier.base_sha256 == sha:
                step = DiagnosisStep(diagnosis=earlier.diagnosis, base_round=base.round, base_sha256=sha,
                                     reused_from=j)
                self.folder.save_step(i, "diagnosis", step)
                return step
        agent = self.team.profiling
        assert agent is not None
        run = await self.run_agent(i, "profiling", agent, render_input(ProfilingInput(
            op=self.op, round=i, kernel_round=base.round, kernel_source=source, result=views.result_view(result))))
        step = DiagnosisStep(diagnosis=run.final_output, base_round=base.round, base_sha256=sha,
                             transcript=[self._transcript(agent.name, "profiling", 0, run)])
        self.folder.save_step(i, "diagnosis", step)
        return step

    async def plan_step(self, i: int, base: RoundRecord, source: str, result: EvalResult, diagnosis: Diagnosis,
                        records: list[RoundRecord]) -> PlanStep:
        cached = self.folder.load_step(i, "plan", PlanStep)
        if cached is not None:
            return cached
        agent = self.team.planning
        assert agent is not None
        run = await self.run_agent(i, "planning", agent, render_input(PlanningInput(
            op=self.op, round=i, rounds_total=self.opts.rounds, kernel_round=base.round, kernel_source=source,
            result=views.result_view(result), diagnosis=diagnosis,
            history=[views.round_view(r) for r in records if r.round > 0])))
        step = PlanStep(plan=run.final_output, base_round=base.round,
                        transcript=[self._transcript(agent.name, "planning", 0, run)])
        self.folder.save_step(i, "plan", step)
        return step

    async def plan_set_step(self, i: int, base: RoundRecord, source: str, result: EvalResult, diagnosis: Diagnosis,
                            records: list[RoundRecord]) -> PlanSetStep:
        """K distinct plans. An answer with too few or repeated directions goes back to the planner with the
        reason (up to --max-fix-attempts times); after that the distinct ones it gave are used, said in the note."""
        cached = self.folder.load_step(i, "plan", PlanSetStep)
        if cached is not None:
            return cached
        agent = self.team.planning
        assert agent is not None
        items: list[Any] = [{"role": "user", "content": render_input(PlanningSetInput(
            op=self.op, round=i, rounds_total=self.opts.rounds, kernel_round=base.round, kernel_source=source,
            result=views.result_view(result), diagnosis=diagnosis, directions=self.k,
            history=views.candidate_history(flat(records))))}]
        transcript: list[TranscriptEntry] = []
        notes: list[str] = []
        plans: list[OptimizationPlan] = []
        for attempt in range(self.opts.max_fix_attempts + 1):
            run = await self.run_agent(i, "planning", agent, items, attempt)
            transcript.append(self._transcript(agent.name, "planning", attempt, run))
            answer: PlanSet = run.final_output
            distinct, problem = distinct_plans(answer.plans, self.k)
            if len(distinct) > len(plans):
                plans = distinct
            if problem is None:
                break
            notes.append(f"answer {attempt}: {problem}")
            self.view.event(f"round {i}: planning: {problem}; asked again")
            items = run.to_input_list() + [{"role": "user", "content": (
                f"{problem}. Answer again with exactly {self.k} plans in `plans`, each a different direction.")}]
        if not plans:
            raise AstraError(f"the planner gave no usable plan ({'; '.join(notes)})")
        if len(plans) < self.k:
            notes.append(f"{len(plans)} distinct plan(s) used: {len(plans)} candidate(s) this round")
        step = PlanSetStep(plans=plans, base_round=base.round, base_candidate=base.candidate,
                           note="; ".join(notes) or None, transcript=transcript)
        self.folder.save_step(i, "plan", step)
        return step

    async def code_step(self, i: int, source: str, plan: OptimizationPlan) -> CodeOutcome:
        return await self._code_with_fixes(i, "coding", render_input(CodingInput(
            op=self.op, round=i, kernel_source=source, plan=plan)))

    async def single_step(self, i: int, base: RoundRecord, source: str, result: EvalResult,
                          records: list[RoundRecord]) -> CodeOutcome:
        return await self._code_with_fixes(i, "single", render_input(SingleAgentInput(
            op=self.op, round=i, rounds_total=self.opts.rounds, kernel_round=base.round, kernel_source=source,
            result=views.result_view(result), history=[views.round_view(r) for r in records if r.round > 0])))

    async def _code_with_fixes(self, i: int, step_name: str, first_input: str,
                               cand: int | None = None) -> CodeOutcome:
        """The coding agent answers; a reply that is not a buildable candidate goes back to it, a bounded
        number of times, with the reason (compiler output, form problem, unreadable reply).

        ``cand``: which of the round's K candidates; its files go to ``rNNN/c<cand>/`` and it is checkpointed on
        its own, so a resumed round repeats only the candidates that had not finished."""
        prefix = "" if cand is None else f"c{cand}/"
        cached = self.folder.load_step(i, f"{prefix}code", CodeOutcome)
        if cached is not None:
            return cached
        agent = self.team.coding
        items: list[Any] = [{"role": "user", "content": first_input}]
        outcome = CodeOutcome(source=None, source_file=None, changes=None, built=False, attempts=[])
        for attempt in range(self.opts.max_fix_attempts + 1):
            try:
                run = await self.run_agent(i, step_name, agent, items, attempt, cand)
            except ModelBehaviorError as e:  # the reply was not the JSON object asked for
                outcome.attempts.append(CodeAttempt(attempt=attempt, kind="invalid_reply", error=short_error(e)))
                items = items + [{"role": "user", "content": (
                    f"Your last reply could not be read as the required JSON object ({short_error(e)}). "
                    f"Answer again with the complete source file in the `source` field.")}]
                continue
            except (EvalPending, ModelAuthFailed):
                raise
            except Exception as e:  # transport, model or tool failure: it ends the round, not the run
                if not outcome.attempts:
                    raise
                outcome.error = f"fixing stopped at attempt {attempt}: {short_error(e)}"  # keep what came before
                break
            outcome.transcript.append(self._transcript(agent.name, step_name, attempt, run))
            answer = run.final_output
            if isinstance(answer, SingleAgentRound):
                outcome.diagnosis_text, outcome.plan_text = answer.diagnosis, list(answer.plan)
            assert isinstance(answer, (CandidateSource, SingleAgentRound))
            path = self.folder.write_source(i, f"{prefix}attempt{attempt}{self.suffix}", answer.source)
            self.view.update(i, "harness", f"checking {prefix}attempt {attempt}")
            check = self._check(path, i, cand)
            atomic_write(path.with_suffix(".check.json"), check.model_dump_json(indent=1, exclude={"result"}))
            outcome.attempts.append(CodeAttempt(attempt=attempt, kind="candidate",
                                                source_file=str(path.relative_to(self.folder.path)), check=check))
            outcome.source, outcome.changes = answer.source, answer.changes
            outcome.source_file = str(path.relative_to(self.folder.path))
            outcome.built = check.built
            if check.built:
                break
            self.view.event(f"round {i}: {prefix}attempt {attempt} did not build; fed back")
            items = run.to_input_list() + [{"role": "user", "content": (
                f"The candidate failed to build:\n{check.log}\n\nReturn the corrected complete source file.")}]
        if outcome.built:
            final = self.folder.write_source(i, f"{prefix}candidate{self.suffix}", outcome.source or "")
            outcome.source_file = str(final.relative_to(self.folder.path))
        self.folder.save_step(i, f"{prefix}code", outcome)
        return outcome

    # ------------------------------------------------------------------------------- winner, best/
    async def choose_winner(self) -> WinnerInfo:
        records = self.folder.records()
        entries = flat(records)
        rejected: list[str] = []
        timed = [r for r in entries if r.round > 0 and r.correct and r.geomean_speedup is not None]
        winner = WinnerInfo(round=None, reason="")
        if not any(r.geomean_speedup is not None for r in records):
            winner.reason = ("no timing on this device: correct candidates are listed, none is chosen "
                             "(evaluate on a GPU, e.g. through --eval-queue)")
        for r in ranked(entries):
            if r.geomean_speedup is None or r.geomean_speedup <= 1.0:
                break
            self.view.update(None, "harness", f"held-out check of {r.key}")
            tag = "" if r.candidate is None else f"-c{r.candidate}"
            held = self.evaluate(r.round, f"r{r.round:03d}{tag}-heldout", self._shipped_file(r),
                                 self.spec.heldout(), name=_step_name(r.candidate, "heldout"), cand=r.candidate)
            if held.ok:
                there = self._ranking_result(r, records)
                why = ("the seed (round 1, not written by this run): no later round beat it; correct on held-out "
                       "shapes" if r.seed else "best correct candidate by geomean speedup, correct on held-out shapes")
                winner = WinnerInfo(round=r.round, reason=why, geomean_speedup=there.geomean_speedup, heldout_ok=True,
                                    heldout_geomean_speedup=held.geomean_speedup, rejected=rejected,
                                    timing_source=_timing_source(there), candidate=r.candidate)
                break
            rejected.append(f"{r.key}: failed held-out ({views.failure_text(held)})")
        if winner.round is None and not winner.reason:
            winner.reason = ("no correct candidate beat the original" if timed else "no correct timed candidate")
            winner.rejected = rejected
        mixed = mixed_gpus_note(entries)
        if mixed:
            winner.reason += f"; {mixed}"
            self.view.event(f"note: {mixed}")
        self.write_best(winner, records)
        return winner

    def _ranking_result(self, r: RoundRecord, records: list[RoundRecord]) -> EvalResult:
        """``r``'s result on the GPU the run ranks on: its own, or the re-time there when its own evaluation ran
        on another GPU. The winner is reported, and stands beside the sweep baseline, with the times it was
        ranked by: single r1 of the decode-attention run was reported 1.755x (H200) for a run ranking on the
        H100, where it re-timed 1.534x (2026-12-06)."""
        own = self.result_of(r.round, r.candidate)
        gpu, mine = ranking_gpu(flat(records)), gpu_of(r)
        if gpu is None or mine is None or platform_info.same_gpu(mine, gpu):
            return own
        for rr in sorted(records, key=lambda x: -x.round):  # the latest re-time there
            if any((t.of_round, t.of_candidate) == (r.round, r.candidate) and platform_info.same_gpu(t.gpu, gpu)
                   for t in rr.retimes):
                for label in (_retime_label(rr.round, r, True), _retime_label(rr.round, r, False)):
                    got = self.folder.load_step(rr.round, f"again/{label}", EvalResult)
                    if got is not None and got.candidate_sha256 == own.candidate_sha256 and got.ok:
                        return got
        return own

    def _shipped_file(self, r: RoundRecord) -> Path:
        """The text best/ would ship for this entry, which is what the held-out check must judge: a tunable
        candidate's frozen source (its table chosen on the test shapes), else the candidate as written. Handing
        the held-out check the TUNE source swept it again on the held-out shapes, so it judged a table tuned on
        the very shapes meant to be unseen, and spent a GPU sweep doing so (K=4 r2 c0's check, H100 2026-12-06)."""
        path = self.folder.path / (r.candidate_file or "")
        try:
            sweep = self.result_of(r.round, r.candidate).sweep
        except AstraError:
            return path
        if sweep is None or sweep.frozen_source is None:
            return path
        shipped = path.with_name(f"{path.stem}.shipped{path.suffix}")
        atomic_write(shipped, sweep.frozen_source)
        return shipped

    def write_best(self, winner: WinnerInfo, records: list[RoundRecord]) -> None:
        best = self.folder.best_dir
        best.mkdir(exist_ok=True)
        for old in best.iterdir():
            if old.is_file():
                old.unlink()
        summary: dict[str, Any] = {"op": self.manifest.short_name, "op_id": self.manifest.op_id,
                                   "run_id": self.meta.run_id, "model": self.meta.model, "rounds": self.meta.rounds,
                                   "mode": self.meta.mode, "label": self.opts.label, "winner": winner.model_dump()}
        if self.k > 1:
            summary["candidates_per_round"] = self.k
        if winner.round is not None:
            rec = next(r for r in flat(records) if r.round == winner.round and r.candidate == winner.candidate)
            win_result = self.result_of(winner.round, winner.candidate)
            sweep = win_result.sweep  # a tunable candidate ships its frozen source
            atomic_write(best / self.original.name, (sweep.frozen_source if sweep else None) or rec.source or "")
            there = self._ranking_result(rec, records)  # the times it won by; its own GPU's kept beside them
            atomic_write(best / "result.json", there.model_dump_json(indent=1))
            if there is not win_result:
                atomic_write(best / "result.own-gpu.json", win_result.model_dump_json(indent=1))
            held = self.folder.load_step(winner.round, _step_name(winner.candidate, "heldout"), EvalResult)
            if held is not None:
                atomic_write(best / "heldout.json", held.model_dump_json(indent=1))
            summary["source_sha256"] = (sweep.frozen_sha256 if sweep else None) or rec.candidate_sha256
            summary["evidence"] = ["result.json (test shapes)", "heldout.json (held-out shapes)"]
            if there is not win_result:
                summary["evidence"].append(f"result.own-gpu.json (test shapes on {win_result.device}, where it "
                                           "was first evaluated)")
        atomic_write(best / "summary.json", json.dumps(summary, indent=1) + "\n")

    # =========================================================================== plumbing and tools
    async def run_agent(self, rnd: int, step: str, agent: Any, input: Any, attempt: int = 0,
                        cand: int | None = None) -> Any:
        """One agent run with its own run context: its tools and its model's call records name this round, step
        and candidate, whichever of the round's K agents runs beside it."""
        run = AgentContext(round=rnd, step=step, agent=agent.name, candidate=cand)
        config = replace(self.run_config, model=self.model.scoped(run))
        self.view.update(rnd, agent.name, step + (f" c{cand}" if cand is not None else "")
                         + (f" (fix {attempt})" if attempt else ""))
        started, t0 = now_iso(), time.monotonic()
        spent = RunUsage()
        try:
            result = await Runner.run(agent, input, context=run, max_turns=self.opts.max_turns, run_config=config,
                                      hooks=spent)
        except BaseException as e:
            self.folder.append_step(StepRecord(round=rnd, step=step, agent=agent.name, attempt=attempt,
                                               started=started, wall_s=time.monotonic() - t0,
                                               tokens=spent.tokens(), status="failed",
                                               error=short_error(e), candidate=cand))
            raise
        source = getattr(result.final_output, "source", None)
        self.folder.append_step(StepRecord(round=rnd, step=step, agent=agent.name, attempt=attempt, started=started,
                                           wall_s=time.monotonic() - t0,
                                           tokens=token_count(result.context_wrapper.usage),
                                           status="ok", candidate=cand,
                                           candidate_sha256=sha256_text(source) if isinstance(source, str) else None))
        return result

    def evaluate(self, rnd: int, label: str, candidate: Path | None, spec: EvalSpec | None = None,
                 name: str = "result", cand: int | None = None) -> EvalResult:
        """Checkpointed: a round's result is computed (or fetched from the queue) once."""
        cached = self.folder.load_step(rnd, name, EvalResult)
        if cached is not None:
            return cached
        self.view.update(rnd, "harness", f"evaluating {label} ({self.evaluator.description})")
        started, t0 = now_iso(), time.monotonic()
        result = self.evaluator.evaluate(label, candidate, spec or self.spec)
        self.folder.save_step(rnd, name, result)
        self._eval_step(rnd, name, cand, started, time.monotonic() - t0, result)
        return result

    def _retime_asks(self, i: int, base: RoundRecord,
                     records: list[RoundRecord]) -> list[tuple[str, Path, str, RoundRecord]]:
        """What round i's evaluation times again should it run on another GPU (winner.contenders): label, source,
        the GPU whose time stands, the kernel's record; the base's label is rNNN-base."""
        asks = []
        for r, gpu in contenders(flat(records), base):
            if r.candidate_file:
                asks.append((_retime_label(i, r, r is base), self.folder.path / r.candidate_file, gpu, r))
        return asks

    def evaluate_round(self, rnd: int, items: list[tuple[int | None, str, Path]], base: RoundRecord,
                       records: list[RoundRecord]) -> tuple[list[EvalResult], list[Retime]]:
        """A round's candidates (index, label, source) in one evaluation, and the kernels they compete with timed
        again beside them where they ran on another GPU; each result is its own checkpoint, so a resumed round
        asks only for the ones it lacks (and a queue run stops once for the whole batch)."""
        done = {j: self.folder.load_step(rnd, _step_name(j, "result"), EvalResult) for j, _, _ in items}
        todo = [(j, label, path) for j, label, path in items if done[j] is None]
        asks = self._retime_asks(rnd, base, records)
        again: dict[str, EvalResult | None] = {a[0]: self.folder.load_step(rnd, f"again/{a[0]}", EvalResult)
                                               for a in asks}
        ask = [(label, path, gpu) for label, path, gpu, _ in asks if again[label] is None]
        if todo or ask:
            self.view.update(rnd, "harness", f"evaluating {len(todo)} candidate(s) ({self.evaluator.description})")
            started, t0 = now_iso(), time.monotonic()
            fresh, timed_again = self.evaluator.evaluate_round([(label, path) for _, label, path in todo], self.spec,
                                                               ask)
            wall = time.monotonic() - t0
            for (j, _, _), result in zip(todo, fresh):
                self.folder.save_step(rnd, _step_name(j, "result"), result)
                # builds ran in parallel, checks one after another: each candidate is charged its own share
                self._eval_step(rnd, _step_name(j, "result"), j, started,
                                result.wall_s or wall / max(1, len(todo)), result)
                done[j] = result
            for (label, _, _), got in zip(ask, timed_again):
                if got is not None:
                    self.folder.save_step(rnd, f"again/{label}", got)
                    self._eval_step(rnd, f"again/{label}", None, started, got.wall_s, got)
                    again[label] = got
        retimes = []
        for label, _, _, r in asks:
            retime = _retime_of(again[label], r)
            if retime is not None:
                retimes.append(retime)
                self.view.event(f"round {rnd}: {r.key} timed again on {retime.gpu} beside the candidates: "
                                + (f"{retime.geomean_speedup:.3f}x" if retime.geomean_speedup else "no timing")
                                + f" (its own: {r.geomean_speedup or 0:.3f}x on {gpu_of(r)})")
        return [r for r in (done[j] for j, _, _ in items) if r is not None], retimes

    def _eval_step(self, rnd: int, name: str, cand: int | None, started: str, wall: float,
                   result: EvalResult) -> None:
        self.folder.append_step(StepRecord(round=rnd, step=f"evaluate:{name}", agent="harness", started=started,
                                           wall_s=wall, status="ok", candidate=cand,
                                           candidate_sha256=result.candidate_sha256,
                                           speedup=result.geomean_speedup))

    def result_of(self, rnd: int, cand: int | None = None) -> EvalResult:
        result = self.folder.load_step(rnd, _step_name(cand, "result"), EvalResult)
        if result is None:
            raise AstraError(f"round {rnd} has no result in {self.folder.round_dir(rnd)}")
        return result

    def _base_path(self) -> Path | None:
        if self.base is None or self.base.round == 0 or not self.base.candidate_file:
            return None
        return self.folder.path / self.base.candidate_file

    def _check(self, path: Path, rnd: int, cand: int | None) -> CheckReport:
        started, t0 = now_iso(), time.monotonic()
        try:
            report = self.evaluator.check(path, self.spec)
        except AstraError as e:
            report = CheckReport(built=False, how="harness", log=str(e)[-6000:])
        self.folder.append_step(StepRecord(round=rnd, step=f"check:{path.name}", agent="harness",
                                           started=started, wall_s=time.monotonic() - t0, status="ok",
                                           candidate=cand))
        return report

    def _transcript(self, agent: str, step: str, attempt: int, run: Any) -> TranscriptEntry:
        return TranscriptEntry(agent=agent, step=step, attempt=attempt, items=jsonable(run.to_input_list()))

    def _cost(self, i: int, cand: int | None = None) -> tuple[TokenCount, float]:
        """Tokens and wall time of round i's steps (of one candidate's steps when ``cand`` is given)."""
        tokens, wall = TokenCount(), 0.0
        path = self.folder.path / "steps.jsonl"
        if path.is_file():
            for line in path.read_text().splitlines():
                try:
                    s = StepRecord.model_validate_json(line)
                except ValueError:
                    continue
                if s.round == i and (cand is None or s.candidate == cand):
                    tokens, wall = tokens + s.tokens, wall + s.wall_s
        return tokens, wall

    def _note_trace(self, i: int, e: BaseException, cand: int | None = None) -> None:
        where = "" if cand is None else f"c{cand}/"
        atomic_write(self.folder.round_dir(i) / f"{where}error.txt", "".join(traceback.format_exception(e)))
        self.view.event(f"round {i}{' candidate ' + str(cand) if where else ''} failed: {short_error(e)}")

    # ToolBackend ------------------------------------------------------------------------------------
    def check_candidate(self, source: str, run: AgentContext) -> str:
        rnd, cand = run.round, run.candidate  # the calling agent's own run: K of them check at once
        with self._checks_lock:
            self._checks += 1
            n = self._checks
        path = self.folder.write_source(rnd, f"{_step_name(cand, 'tool-check')}{n}{self.suffix}", source)
        self.view.update(rnd, "harness", f"tool check {n}")
        return self._check(path, rnd, cand).text()

    def _base_result(self) -> EvalResult:
        if self.base is None:
            return self.result_of(0)
        return self.result_of(self.base.round, self.base.candidate)

    def run_timing(self) -> str:
        return views.timing_text(self._base_result())

    def resource_report(self) -> str:
        return views.resources_text(self._base_result())

    def nsight_compute(self) -> str:
        from astra_sglang.loop.ncu import profile_with_ncu

        return profile_with_ncu(self.op_dir, self.manifest, self._base_path(), self.spec)


def _step_name(cand: int | None, name: str) -> str:
    """A step file of the round, or of candidate ``cand`` of a K-candidate round (``c<cand>/<name>``)."""
    return name if cand is None else f"c{cand}/{name}"


def _retime_label(i: int, r: RoundRecord, as_base: bool) -> str:
    """The queue label under which round i times ``r`` again: rNNN-base for its base, else rNNN-retime-<r>."""
    if as_base:
        return f"r{i:03d}-base"
    return f"r{i:03d}-retime-r{r.round:03d}" + (f"-c{r.candidate}" if r.candidate is not None else "")


def _retime_of(result: EvalResult | None, r: RoundRecord) -> Retime | None:
    """A re-time's result as the round records it; None where none ran (NOT_RETIMED) or nothing was timed."""
    if result is None or (result.error or "").startswith(NOT_RETIMED):
        return None
    gpu = platform_info.gpu_of_text(result.device)
    if gpu is None:
        return None
    return Retime(of_round=r.round, of_candidate=r.candidate, gpu=gpu,
                  geomean_speedup=result.geomean_speedup if result.ok else None,
                  timing_source=_timing_source(result), correct=result.ok)


def _timing_source(result: EvalResult) -> str | None:
    if result.timing is None:
        return None
    return f"{result.device}; {result.timing.method}"
