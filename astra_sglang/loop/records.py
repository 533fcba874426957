"""On-disk schemas of an optimizer run (``runs/<op>/<run-id>/``): options, rounds, steps, the winner.

No openai-agents or torch import: ``evaluate`` on a GPU host and report tools read these too.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

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


class TuneOutcome(Model):
    """The sweep baseline of the op's original (``astra-sglang tune``), or why there is none."""

    baseline: SweepBaseline | None = None
    error: str | None = None


class LoopOptions(Model):
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


RunStatus = Literal["running", "waiting_eval", "done", "failed", "interrupted"]


class WinnerInfo(Model):
    round: int | None = Field(description="None: no candidate beat the original")
    reason: str
    geomean_speedup: float | None = None
    heldout_ok: bool | None = None
    heldout_geomean_speedup: float | None = None
    rejected: list[str] = Field(default_factory=list, description="candidates that ranked higher but failed held-out")
    timing_source: str | None = None


class RunMeta(Model):
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


class StepRecord(Model):
    """One line of ``steps.jsonl``: what each agent step cost."""

    round: int
    step: str
    agent: str
    attempt: int = 0
    started: str
    wall_s: float
    tokens: TokenCount = Field(default_factory=TokenCount)
    status: Literal["ok", "failed"]
    error: str | None = None


class TranscriptEntry(Model):
    agent: str
    step: str
    attempt: int = 0
    items: list[dict[str, Any]]


class CheckReport(Model):
    """A quick verdict for the coding agent within a round (build + correctness where this host can)."""

    built: bool
    correct: bool | None = None
    how: Literal["harness", "compile-only", "static"]
    log: str = ""
    first_failure: str | None = None
    result: EvalResult | None = None

    def text(self) -> str:
        lines = [f"check ({self.how}): " + ("BUILD OK" if self.built else "BUILD FAILED")]
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


class RoundRecord(Model):
    """One line of ``log.jsonl``: everything about one round, including the agents' transcript."""

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
