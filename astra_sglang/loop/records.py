"""On-disk schemas of an optimizer run (``runs/<op>/<run-id>/``): options, rounds, steps, the winner.

No openai-agents or torch import: ``evaluate`` on a GPU host and report tools read these too.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from astra_sglang.agents.config import ModelOptions, RetryPolicy, TokenCount
from astra_sglang.agents.schemas import (
    Diagnosis,
    OptimizationPlan,
    ProposedCase,
    Suggestion,
    SuiteProposal,
)
from astra_sglang.contract.base import Model
from astra_sglang.contract.result import EvalResult, ShapeTiming, SweepBaseline

SCHEMA_VERSION = 1


class Extended(Model):
    """A record that gained fields after run folders were first written (k candidates a round, early stop).

    The fields named in ``added`` are left out while they hold their default, so a run that does not use
    them (one candidate a round) writes the same bytes as before, and old folders still read."""

    added: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _leave_out_unused_additions(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for name in self.added:
                if name in data and getattr(self, name) == type(self).model_fields[name].get_default(
                        call_default_factory=True):
                    del data[name]
        return data


class EvalSpec(Model):
    """What to evaluate a kernel on; the loop's side of the harness's EvalConfig (see loop/evaluator.py)."""

    shapes: str = "test"
    include_heldout: bool = False
    device: str = "auto"
    mode: Literal["cold", "warm"] = "cold"
    suite: list[ProposedCase] = Field(default_factory=list, description="the Testing agent's extra cases")
    harness: dict[str, Any] = Field(default_factory=dict, description="extra EvalConfig fields, passed through")

    def heldout(self) -> EvalSpec:
        return self.model_copy(update={"include_heldout": True})


class QueueRequest(Model):
    """``QUEUE/<item>/request.json``: everything a GPU host needs, with the candidate file beside it."""

    schema_version: int = 1
    item_id: str
    run_id: str
    label: str
    op: str
    op_id: str
    candidate_file: str | None = None
    candidate_sha256: str | None = None
    spec: EvalSpec
    created: str
    note: str | None = None
    job: Literal["evaluate", "tune"] = Field("evaluate", description="tune: `sweep_baseline` of the op's original "
                                             "(no candidate); its answer is <item>/baseline.json (TuneOutcome)")
    verdict_sha256: str | None = Field(None, description="what verdicts depend on in the op contract the run "
                                       "was made against (verdict_digest): a host whose extracted/<op> states other "
                                       "shapes, files or tolerances refuses the item; None before 2026-12-06")
    retime_unless_on: str | None = Field(None, description="a kernel a round competes with (its base, the latest "
                                         "round's fastest per GPU), already timed on this GPU: a host with that GPU "
                                         "answers NOT_RETIMED at once, another one times it beside the round's "
                                         "candidates, so the round's ranking is like for like")


NOT_RETIMED = "not re-timed"  # the error of a re-time answered without running: the host has the kernel's GPU


class Retime(Model):
    """A kernel that competes (a round's base, the fastest of the latest round on each GPU) timed again beside a
    round's candidates, on their GPU, because its own times came from another GPU (the device pool hands out H100s
    and H200s; ratios from different GPUs are not comparable)."""

    of_round: int
    of_candidate: int | None = None
    gpu: str
    geomean_speedup: float | None = None
    timing_source: str | None = None
    correct: bool = True


class TuneOutcome(Model):
    """The sweep baseline of the op's original (``astra-sglang tune``), or why there is none."""

    baseline: SweepBaseline | None = None
    error: str | None = None
    pending: list[str] = Field(default_factory=list, description="queue items of the sweep not answered yet: the "
                               "rounds go on, and the run does not end before they are (optimizer._sweep_filled)")


class LoopOptions(Extended):
    added = ("candidates", "patience", "stop_at_bound_margin", "seed_kernel")

    rounds: int = Field(default=5, ge=0)
    single_agent: bool = False
    max_fix_attempts: int = Field(default=3, ge=0)
    max_turns: int = Field(default=12, ge=2)
    model: ModelOptions = Field(default_factory=ModelOptions)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    eval_queue: str | None = None
    eval_wait_s: float = Field(default=0.0, ge=0, description="0 = stop the run and let --resume pick results up")
    eval: EvalSpec = Field(default_factory=EvalSpec)
    ncu: bool = False
    label: str | None = Field(default=None, description="shown in the log, the tables and best/, e.g. SCRIPTED")
    candidates: int = Field(default=1, ge=1, le=16, description="K: distinct directions planned, coded and "
                            "evaluated together each round")
    patience: int | None = Field(default=None, ge=1, description="stop after this many rounds without gain")
    stop_at_bound_margin: float | None = Field(
        default=None, ge=0, lt=1, description="stop when the best is within this fraction of the copy bound")
    seed_kernel: str | None = Field(default=None, description="a kernel round 1 evaluates instead of asking the "
                                    "model (an earlier run's winner, to go on from): its copy in the run folder")


RunStatus = Literal["running", "waiting_eval", "done", "failed", "interrupted"]


class WinnerInfo(Extended):
    """The run's winner. ``geomean_speedup`` and ``timing_source`` are its times on the GPU the run ranked on
    (a re-time there when its own evaluation ran on another GPU), the ones best/result.json holds."""

    added = ("candidate",)

    round: int | None = Field(description="None: no candidate beat the original")
    reason: str
    geomean_speedup: float | None = None
    heldout_ok: bool | None = None
    heldout_geomean_speedup: float | None = None
    rejected: list[str] = Field(default_factory=list, description="candidates that ranked higher but failed held-out")
    timing_source: str | None = None
    candidate: int | None = Field(default=None, description="which of the round's K candidates (K > 1)")


class RunMeta(Extended):
    """``run.json``. ``model`` and ``rounds`` are top-level so the patch registry can cite them."""

    schema_version: int = SCHEMA_VERSION
    run_id: str
    op: str
    op_id: str
    op_dir: str
    model: str
    rounds: int
    mode: Literal["multi-agent", "single-agent"]
    created: str
    updated: str
    status: RunStatus = "running"
    message: str | None = None
    label: str | None = None
    options: LoopOptions
    winner: WinnerInfo | None = None
    stop_reason: str | None = Field(default=None, description="why the rounds stopped before --rounds")
    verdict_sha256: str | None = Field(default=None, description="what the run's verdicts depend on in the op "
                                       "contract it was made against (verdict_digest): a resume under a contract "
                                       "with another is refused")

    added = ("stop_reason", "verdict_sha256")


class StepRecord(Extended):
    """One line of ``steps.jsonl``: what each agent step cost."""

    added = ("candidate", "candidate_sha256", "speedup")

    round: int
    step: str
    agent: str
    attempt: int = 0
    started: str
    wall_s: float
    tokens: TokenCount = Field(default_factory=TokenCount)
    status: Literal["ok", "failed"]
    error: str | None = None
    candidate: int | None = Field(default=None, description="which of the round's K candidates (K > 1)")
    candidate_sha256: str | None = Field(default=None, description="the source this step answered or evaluated")
    speedup: float | None = Field(default=None, description="evaluation steps: the measured geomean speedup")


class TranscriptEntry(Model):
    agent: str
    step: str
    attempt: int = 0
    items: list[dict[str, Any]]


class CheckReport(Extended):
    """A quick verdict for the coding agent within a round (build + correctness where this host can).

    ``ran`` says in one sentence exactly what ran, so the agent knows how much the verdict is worth."""

    added = ("ran",)

    built: bool
    correct: bool | None = None
    how: Literal["harness", "compile-only", "static"]
    log: str = ""
    first_failure: str | None = None
    result: EvalResult | None = None
    ran: str | None = None

    def text(self) -> str:
        lines = [f"check ({self.how}): " + ("BUILD OK" if self.built else "BUILD FAILED")]
        if self.ran:
            lines.append(self.ran)
        if self.log:
            lines.append(self.log)
        if self.built:
            if self.correct is True:
                cases = self.result.correctness.cases_run if self.result and self.result.correctness else 0
                lines.append(f"CORRECT on all {cases} checked cases")
            elif self.correct is False:
                lines.append(f"INCORRECT: {self.first_failure}")
            else:
                lines.append("correctness not checked on this host (it is checked when the round is evaluated)")
        return "\n".join(lines)


class SuiteStep(Model):
    """Round 0's testing step: what the agent proposed, what the contract allowed, what the harness runs."""

    proposal: SuiteProposal | None = None
    accepted: list[ProposedCase] = Field(default_factory=list)
    rejected: list[str] = Field(default_factory=list)
    used_by_harness: bool = False
    note: str = ""
    transcript: list[TranscriptEntry] = Field(default_factory=list)


class DiagnosisStep(Model):
    diagnosis: Diagnosis
    base_round: int
    base_sha256: str
    reused_from: int | None = None
    transcript: list[TranscriptEntry] = Field(default_factory=list)


class PlanStep(Model):
    plan: OptimizationPlan
    base_round: int
    transcript: list[TranscriptEntry] = Field(default_factory=list)


class PlanSetStep(Model):
    """K > 1: the planner's K distinct directions (fewer when it could not give K distinct ones)."""

    plans: list[OptimizationPlan]
    base_round: int
    base_candidate: int | None = None
    note: str | None = Field(default=None, description="what was refused or repaired on the way")
    transcript: list[TranscriptEntry] = Field(default_factory=list)


class CodeAttempt(Model):
    attempt: int
    kind: Literal["candidate", "invalid_reply"]
    source_file: str | None = None
    check: CheckReport | None = None
    error: str | None = None


class CodeOutcome(Model):
    """The coding step's cached output: the last candidate and every attempt that led to it."""

    source: str | None
    source_file: str | None
    changes: str | None
    built: bool
    attempts: list[CodeAttempt]
    diagnosis_text: str | None = None  # single-agent mode
    plan_text: list[str] = Field(default_factory=list)  # single-agent mode
    error: str | None = Field(default=None, description="why fixing stopped early (model call failed...)")
    transcript: list[TranscriptEntry] = Field(default_factory=list)


RoundStatus = Literal["ok", "incorrect", "build_failed", "failed"]


class RoundRecord(Extended):
    """One line of ``log.jsonl``: everything about one round, including the agents' transcript.

    With K > 1 candidates a round, ``candidates`` holds one record per candidate (``candidate`` = its index)
    and the round's own fields are those of its best candidate, so tables and plots read one line a round."""

    added = ("candidate", "base_candidate", "candidates", "plan_note", "retimes", "seed")

    round: int
    status: RoundStatus
    base_round: int | None = None
    candidate_file: str | None = None
    candidate_sha256: str | None = None
    source: str | None = None
    correct: bool | None = None
    first_failure: str | None = None
    geomean_speedup: float | None = None
    timing_source: str | None = Field(default=None, description="device and method the times come from")
    timing_suspect: list[str] = Field(default_factory=list)
    times: list[ShapeTiming] = Field(default_factory=list)
    sweep_baseline: TuneOutcome | None = Field(default=None, description="round 0: the original with its own "
                                               "launch parameters retuned per shape (the bar after the original)")
    diagnosis: Diagnosis | None = None
    diagnosis_text: str | None = None
    plan: OptimizationPlan | None = None
    suggestions: list[Suggestion] = Field(default_factory=list)
    changes: str | None = None
    fix_attempts: int = 0
    error: str | None = None
    tokens: TokenCount = Field(default_factory=TokenCount)
    wall_s: float = 0.0
    transcript: list[TranscriptEntry] = Field(default_factory=list)
    label: str | None = None
    candidate: int | None = None
    base_candidate: int | None = None
    candidates: list[RoundRecord] = Field(default_factory=list)
    plan_note: str | None = Field(default=None, description="K > 1: what the planner's answers needed")
    retimes: list[Retime] = Field(default_factory=list, description="kernels that compete, timed again beside this "
                                  "round's candidates on their GPU, where their own times came from another")
    seed: str | None = Field(default=None, description="round 1 of a seeded run: where the kernel it evaluated "
                             "came from (not written by this run; no model was asked)")

    def entries(self) -> list[RoundRecord]:
        """The round's candidates (itself when it had one)."""
        return list(self.candidates) if self.candidates else [self]

    @property
    def key(self) -> str:
        return f"round {self.round}" + (f" candidate {self.candidate}" if self.candidate is not None else "")


class RoundSummary(Model):
    round: int
    status: RoundStatus
    correct: bool | None = None
    geomean_speedup: float | None = None
    problem: str | None = Field(default=None, description="the round's error or first failure, shortened")


class RunSummary(Model):
    """What ``optimize --json`` prints when it stops: the outcome for a script; the run folder holds the rest."""

    run_id: str
    op: str
    run_dir: str
    status: RunStatus
    exit_code: int
    message: str | None = None
    winner: WinnerInfo | None = None
    rounds: list[RoundSummary] = Field(default_factory=list)
    best_dir: str | None = None
    plot: str | None = None
    waiting_for: list[str] = Field(default_factory=list, description="queue items without a result yet")
