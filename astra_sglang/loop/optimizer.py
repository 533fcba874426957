"""Astra's Algorithm 1 on the openai-agents SDK: test suite, then R rounds of profile, plan, code, check, time.

Round 0 measures the original. Each round i starts from the best correct kernel so far (the original in
round 1), and every step's output is a checkpoint in the run folder, so a killed run resumes at the step
that was in flight. A round whose model calls keep failing is recorded as failed and the run goes on; only
a setup problem (the original failing its own evaluation, rejected credentials) stops the run.
"""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path
from typing import Any

from agents import RunConfig, Runner
from agents.exceptions import ModelBehaviorError
from agents.models.interface import Model

from astra_sglang.agents.config import TokenCount
from astra_sglang.agents.recording import ModelAuthFailed, jsonable, short_error
from astra_sglang.agents.schemas import (
    CandidateSource,
    CodingInput,
    Diagnosis,
    OptimizationPlan,
    PlanningInput,
    ProfilingInput,
    SingleAgentInput,
    SingleAgentRound,
    SuiteInput,
    SuiteProposal,
    render_input,
)
from astra_sglang.agents.team import make_team
from astra_sglang.agents.tools import make_tools
from astra_sglang.contract.base import sha256_text
from astra_sglang.contract.op import Manifest
from astra_sglang.contract.result import EvalResult
from astra_sglang.errors import AstraError
from astra_sglang.loop import agent_views as views
from astra_sglang.loop.evaluator import EvalPending, Evaluator
from astra_sglang.loop.records import (
    CheckReport,
    CodeAttempt,
    CodeOutcome,
    DiagnosisStep,
    EvalSpec,
    PlanStep,
    RoundRecord,
    RunMeta,
    StepRecord,
    SuiteStep,
    TranscriptEntry,
    TuneOutcome,
    WinnerInfo,
)
from astra_sglang.loop.runfolder import RunFolder, atomic_write, now_iso
from astra_sglang.loop.static_check import candidate_suffix, original_source_path
from astra_sglang.loop.view import LiveView
from astra_sglang.loop.winner import pick_base, ranked

# Step failures that end the round, not the run: transport gave up, the model misbehaved, a tool broke.
ROUND_ERRORS = (Exception,)


class Optimizer:
    def __init__(self, folder: RunFolder, meta: RunMeta, manifest: Manifest, op_dir: Path, evaluator: Evaluator,
                 model: Model, view: LiveView) -> None:
        self.folder = folder
        self.meta = meta
        self.opts = meta.options
        self.manifest = manifest
        self.op_dir = Path(op_dir)
        self.evaluator = evaluator
        self.view = view
        self.team = make_team(model, make_tools(self, ncu=self.opts.ncu), self.opts.single_agent)
        self.op = views.op_view(manifest)
        self.suffix = candidate_suffix(manifest)
        self.original = original_source_path(self.op_dir, manifest)
        self.run_config = RunConfig(tracing_disabled=not self.opts.model.trace,
                                    workflow_name=f"astra optimize {manifest.short_name}")
        self.spec: EvalSpec = self.opts.eval
        self.round_idx = 0
        self.base: RoundRecord | None = None
        self._checks = 0

    # ================================================================================== the algorithm
    async def run(self) -> WinnerInfo:
        suite = await self.suite_step()
        self.spec = self.opts.eval.model_copy(update={"suite": suite.accepted if suite.used_by_harness else []})
        await self.round_zero()
        for i in range(1, self.opts.rounds + 1):
            if self.folder.record(i) is not None:
                continue  # finished before a kill/stop: never repeated
            record = await self.one_round(i)
            self.folder.finish_round(record)
            self.view.round_done(record)
        return await self.choose_winner()

    # --------------------------------------------------------------------------------------- round 0
    async def suite_step(self) -> SuiteStep:
        cached = self.folder.load_step(0, "suite", SuiteStep)
        if cached is not None:
            return cached
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
        except ROUND_ERRORS as e:
            step = SuiteStep(note=f"testing agent failed ({short_error(e)}); the harness's own suite is used",
                             transcript=transcript)
        self.folder.save_step(0, "suite", step)
        self.view.event(f"test suite: {step.note}")
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
        tune = self.sweep_baseline_step() if result.ok else None
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
        self.round_idx = i
        records = [r for r in self.folder.records() if r.round < i]
        base = pick_base(records)
        self.base = base
        base_result = self.result_of(base.round)
        base_source = views.source_of(base, self.original)
        diag: DiagnosisStep | None = None
        plan: PlanStep | None = None
        code: CodeOutcome | None = None
        record = RoundRecord(round=i, status="failed", base_round=base.round, label=self.opts.label)
        result: EvalResult | None = None
        try:
            if self.team.single:
                code = await self.single_step(i, base, base_source, base_result, records)
            else:
                diag = await self.profile_step(i, base, base_source, base_result)
                plan = await self.plan_step(i, base, base_source, base_result, diag.diagnosis, records)
                code = await self.code_step(i, base_source, plan.plan)
        except (EvalPending, ModelAuthFailed):
            raise
        except ROUND_ERRORS as e:
            record.error = f"{short_error(e)}"
            self._note_trace(i, e)
        if diag is not None:
            record.diagnosis = diag.diagnosis
        if plan is not None:
            record.plan = plan.plan
            record.suggestions = plan.plan.suggestions
        if code is not None:
            record.error = record.error or code.error
            record.diagnosis_text = code.diagnosis_text
            record.changes = code.changes
            record.source = code.source
            record.candidate_file = code.source_file
            record.candidate_sha256 = sha256_text(code.source) if code.source else None
            record.fix_attempts = max(0, len(code.attempts) - 1)
            if code.source_file is None:
                record.status, record.error = "failed", record.error or "no usable candidate in the model's replies"
            elif not code.built:
                last = code.attempts[-1].check if code.attempts else None
                record.status = "build_failed"
                record.first_failure = (last.log if last else "build failed")[-2000:]
            else:
                try:
                    result = self.evaluate(i, f"r{i:03d}", self.folder.path / code.source_file)
                except AstraError as e:  # the harness could not judge this candidate: the round fails
                    record.error = f"evaluation failed: {e}"
                    result = None
            if result is not None:
                record.correct = result.ok
                record.status = "ok" if result.ok else ("build_failed" if not result.build.ok else "incorrect")
                record.first_failure = views.failure_text(result) if not result.ok else None
                record.geomean_speedup = result.geomean_speedup
                record.timing_source = _timing_source(result)
                record.timing_suspect = list(result.timing.suspect) if result.timing else []
                record.times = views.shape_times(result)
        record.transcript = [t for step in (diag, plan, code) if step is not None for t in step.transcript]
        record.tokens, record.wall_s = self._round_cost(i)
        return record

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

    async def code_step(self, i: int, source: str, plan: OptimizationPlan) -> CodeOutcome:
        return await self._code_with_fixes(i, "coding", render_input(CodingInput(
            op=self.op, round=i, kernel_source=source, plan=plan)))

    async def single_step(self, i: int, base: RoundRecord, source: str, result: EvalResult,
                          records: list[RoundRecord]) -> CodeOutcome:
        return await self._code_with_fixes(i, "single", render_input(SingleAgentInput(
            op=self.op, round=i, rounds_total=self.opts.rounds, kernel_round=base.round, kernel_source=source,
            result=views.result_view(result), history=[views.round_view(r) for r in records if r.round > 0])))

    async def _code_with_fixes(self, i: int, step_name: str, first_input: str) -> CodeOutcome:
        """The coding agent answers; a reply that is not a buildable candidate goes back to it, a bounded
        number of times, with the reason (compiler output, form problem, unreadable reply)."""
        cached = self.folder.load_step(i, "code", CodeOutcome)
        if cached is not None:
            return cached
        agent = self.team.coding
        items: list[Any] = [{"role": "user", "content": first_input}]
        outcome = CodeOutcome(source=None, source_file=None, changes=None, built=False, attempts=[])
        for attempt in range(self.opts.max_fix_attempts + 1):
            try:
                run = await self.run_agent(i, step_name, agent, items, attempt)
            except ModelBehaviorError as e:  # the reply was not the JSON object asked for
                outcome.attempts.append(CodeAttempt(attempt=attempt, kind="invalid_reply", error=short_error(e)))
                items = items + [{"role": "user", "content": (
                    f"Your last reply could not be read as the required JSON object ({short_error(e)}). "
                    f"Answer again with the complete source file in the `source` field.")}]
                continue
            except (EvalPending, ModelAuthFailed):
                raise
            except ROUND_ERRORS as e:
                if not outcome.attempts:
                    raise
                outcome.error = f"fixing stopped at attempt {attempt}: {short_error(e)}"  # keep what came before
                break
            outcome.transcript.append(self._transcript(agent.name, step_name, attempt, run))
            answer = run.final_output
            if isinstance(answer, SingleAgentRound):
                outcome.diagnosis_text, outcome.plan_text = answer.diagnosis, list(answer.plan)
            assert isinstance(answer, (CandidateSource, SingleAgentRound))
            path = self.folder.write_source(i, f"attempt{attempt}{self.suffix}", answer.source)
            self.view.update(i, "harness", f"checking attempt {attempt}")
            check = self._check(path)
            atomic_write(path.with_suffix(".check.json"), check.model_dump_json(indent=1, exclude={"result"}))
            outcome.attempts.append(CodeAttempt(attempt=attempt, kind="candidate",
                                                source_file=str(path.relative_to(self.folder.path)), check=check))
            outcome.source, outcome.changes = answer.source, answer.changes
            outcome.source_file = str(path.relative_to(self.folder.path))
            outcome.built = check.built
            if check.built:
                break
            self.view.event(f"round {i}: attempt {attempt} did not build; fed back")
            items = run.to_input_list() + [{"role": "user", "content": (
                f"The candidate failed to build:\n{check.log}\n\nReturn the corrected complete source file.")}]
        if outcome.built:
            final = self.folder.write_source(i, f"candidate{self.suffix}", outcome.source or "")
            outcome.source_file = str(final.relative_to(self.folder.path))
        self.folder.save_step(i, "code", outcome)
        return outcome

    # ------------------------------------------------------------------------------- winner, best/
    async def choose_winner(self) -> WinnerInfo:
        records = self.folder.records()
        rejected: list[str] = []
        timed = [r for r in records if r.round > 0 and r.correct and r.geomean_speedup is not None]
        winner = WinnerInfo(round=None, reason="")
        if not any(r.geomean_speedup is not None for r in records):
            winner.reason = ("no timing on this device: correct candidates are listed, none is chosen "
                             "(evaluate on a GPU, e.g. through --eval-queue)")
        for r in ranked(records):
            if r.geomean_speedup is None or r.geomean_speedup <= 1.0:
                break
            self.view.update(None, "harness", f"held-out check of round {r.round}")
            held = self.evaluate(r.round, f"r{r.round:03d}-heldout", self.folder.path / (r.candidate_file or ""),
                                 self.spec.heldout(), name="heldout")
            if held.ok:
                winner = WinnerInfo(round=r.round, reason="best correct candidate by geomean speedup, correct on "
                                    "held-out shapes", geomean_speedup=r.geomean_speedup, heldout_ok=True,
                                    heldout_geomean_speedup=held.geomean_speedup, rejected=rejected,
                                    timing_source=r.timing_source)
                break
            rejected.append(f"round {r.round}: failed held-out ({views.failure_text(held)})")
        if winner.round is None and not winner.reason:
            winner.reason = ("no correct candidate beat the original" if timed else "no correct timed candidate")
            winner.rejected = rejected
        self.write_best(winner, records)
        return winner

    def write_best(self, winner: WinnerInfo, records: list[RoundRecord]) -> None:
        best = self.folder.best_dir
        best.mkdir(exist_ok=True)
        for old in best.iterdir():
            if old.is_file():
                old.unlink()
        summary: dict[str, Any] = {"op": self.manifest.short_name, "op_id": self.manifest.op_id,
                                   "run_id": self.meta.run_id, "model": self.meta.model, "rounds": self.meta.rounds,
                                   "mode": self.meta.mode, "label": self.opts.label, "winner": winner.model_dump()}
        if winner.round is not None:
            rec = next(r for r in records if r.round == winner.round)
            sweep = self.result_of(winner.round).sweep  # a tunable candidate ships its frozen source
            atomic_write(best / self.original.name, (sweep.frozen_source if sweep else None) or rec.source or "")
            atomic_write(best / "result.json", self.result_of(winner.round).model_dump_json(indent=1))
            held = self.folder.load_step(winner.round, "heldout", EvalResult)
            if held is not None:
                atomic_write(best / "heldout.json", held.model_dump_json(indent=1))
            summary["source_sha256"] = (sweep.frozen_sha256 if sweep else None) or rec.candidate_sha256
            summary["evidence"] = ["result.json (test shapes)", "heldout.json (held-out shapes)"]
        atomic_write(best / "summary.json", json.dumps(summary, indent=1) + "\n")

    # =========================================================================== plumbing and tools
    async def run_agent(self, rnd: int, step: str, agent: Any, input: Any, attempt: int = 0) -> Any:
        self.folder.set_scope(rnd, step, agent.name)
        self.view.update(rnd, agent.name, step + (f" (fix {attempt})" if attempt else ""))
        started, t0 = now_iso(), time.monotonic()
        try:
            result = await Runner.run(agent, input, max_turns=self.opts.max_turns, run_config=self.run_config)
        except BaseException as e:
            self.folder.append_step(StepRecord(round=rnd, step=step, agent=agent.name, attempt=attempt,
                                               started=started, wall_s=time.monotonic() - t0,
                                               tokens=self.folder.scope_tokens(), status="failed",
                                               error=short_error(e)))
            raise
        self.folder.append_step(StepRecord(round=rnd, step=step, agent=agent.name, attempt=attempt, started=started,
                                           wall_s=time.monotonic() - t0, tokens=self.folder.scope_tokens(),
                                           status="ok"))
        return result

    def evaluate(self, rnd: int, label: str, candidate: Path | None, spec: EvalSpec | None = None,
                 name: str = "result") -> EvalResult:
        """Checkpointed: a round's result is computed (or fetched from the queue) once."""
        cached = self.folder.load_step(rnd, name, EvalResult)
        if cached is not None:
            return cached
        self.view.update(rnd, "harness", f"evaluating {label} ({self.evaluator.description})")
        started, t0 = now_iso(), time.monotonic()
        result = self.evaluator.evaluate(label, candidate, spec or self.spec)
        self.folder.save_step(rnd, name, result)
        self.folder.append_step(StepRecord(round=rnd, step=f"evaluate:{name}", agent="harness", started=started,
                                           wall_s=time.monotonic() - t0, status="ok"))
        return result

    def result_of(self, rnd: int) -> EvalResult:
        result = self.folder.load_step(rnd, "result", EvalResult)
        if result is None:
            raise AstraError(f"round {rnd} has no result in {self.folder.round_dir(rnd)}")
        return result

    def _base_path(self) -> Path | None:
        if self.base is None or self.base.round == 0 or not self.base.candidate_file:
            return None
        return self.folder.path / self.base.candidate_file

    def _check(self, path: Path) -> CheckReport:
        started, t0 = now_iso(), time.monotonic()
        try:
            report = self.evaluator.check(path, self.spec)
        except AstraError as e:
            report = CheckReport(built=False, how="harness", log=str(e)[-6000:])
        self.folder.append_step(StepRecord(round=self.round_idx, step=f"check:{path.name}", agent="harness",
                                           started=started, wall_s=time.monotonic() - t0, status="ok"))
        return report

    def _transcript(self, agent: str, step: str, attempt: int, run: Any) -> TranscriptEntry:
        return TranscriptEntry(agent=agent, step=step, attempt=attempt, items=jsonable(run.to_input_list()))

    def _round_cost(self, i: int) -> tuple[TokenCount, float]:
        tokens, wall = TokenCount(), 0.0
        path = self.folder.path / "steps.jsonl"
        if path.is_file():
            for line in path.read_text().splitlines():
                try:
                    s = StepRecord.model_validate_json(line)
                except ValueError:
                    continue
                if s.round == i:
                    tokens, wall = tokens + s.tokens, wall + s.wall_s
        return tokens, wall

    def _note_trace(self, i: int, e: BaseException) -> None:
        atomic_write(self.folder.round_dir(i) / "error.txt", "".join(traceback.format_exception(e)))
        self.view.event(f"round {i} failed: {short_error(e)}")

    # ToolBackend ------------------------------------------------------------------------------------
    def check_candidate(self, source: str) -> str:
        self._checks += 1
        path = self.folder.write_source(self.round_idx, f"tool-check{self._checks}{self.suffix}", source)
        self.view.update(self.round_idx, "harness", f"tool check {self._checks}")
        return self._check(path).text()

    def _base_result(self) -> EvalResult:
        return self.result_of(self.base.round if self.base is not None else 0)

    def run_timing(self) -> str:
        return views.timing_text(self._base_result())

    def resource_report(self) -> str:
        return views.resources_text(self._base_result())

    def nsight_compute(self) -> str:
        from astra_sglang.loop.ncu import profile_with_ncu

        return profile_with_ncu(self.op_dir, self.manifest, self._base_path(), self.spec)


def _timing_source(result: EvalResult) -> str | None:
    if result.timing is None:
        return None
    return f"{result.device}; {result.timing.method}"
