"""Typed inputs and outputs of the four agents (and the single-agent baseline).

Outputs are the agents' ``output_type``: the SDK sends their JSON schema as a strict structured-output format,
so every field is required and there are no free-form dicts (strict mode forbids them). Inputs are rendered
into the user message by ``render_input``: the agent sees the same typed fields the loop logs.

No openai-agents import here: the run folder and the evaluation queue read these models on hosts that do
not have the SDK.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, Field

from astra_sglang.contract.base import Model

Distribution = Literal["normal", "wide", "tiny", "zeros", "special"]



# ----------------------------------------------------------------------------------------------- outputs


class DimValue(Model):
    name: str = Field(description="a dimension name of the signature (e.g. 'T', 'H', 'D')")
    value: int


class ProposedCase(Model):
    dims: list[DimValue] = Field(description="one value for every dimension of the signature")
    dtype: str = Field(description="one of the op's dtypes")
    distribution: Distribution = Field(description="how input values are drawn")
    why: str = Field(description="what this case exercises (edge, tail, alignment, special values...)")


class SuiteProposal(Model):
    """The Testing agent's answer: cases to add to the harness's own suite. The harness decides correctness."""

    cases: list[ProposedCase]
    rationale: str


class Diagnosis(Model):
    """The Profiling agent's reading of timing and resource numbers."""

    bound: Literal["memory", "latency", "compute", "mixed", "unknown"]
    pct_of_copy_ceiling: float | None = Field(
        description="typical % of the measured copy bandwidth; null if unknown")
    where_time_goes: str
    evidence: list[str] = Field(description="the numbers the diagnosis rests on")
    summary: str


class Suggestion(Model):
    title: str
    change: str = Field(description="the concrete code change")
    expected_effect: str
    risk: str = Field(description="what could break (correctness, registers, tails, special values)")


class OptimizationPlan(Model):
    """The Planning agent's answer."""

    suggestions: list[Suggestion]
    lessons_from_history: str = Field(description="what earlier rounds showed: what helped, what broke")
    avoid: list[str] = Field(description="things not to try again, and why")


class PlanSet(Model):
    """The Planning agent's answer when a round codes K candidates: one plan per direction, all different."""

    plans: list[OptimizationPlan] = Field(description="exactly the number of plans asked for, each a "
                                          "different direction (not the same change with other numbers)")


class CandidateSource(Model):
    """The Coding agent's answer: a complete file of the same form as the current kernel."""

    source: str = Field(description="the complete new source file, not a diff")
    changes: str = Field(description="what was changed and why, briefly")


class SingleAgentRound(Model):
    """The single-agent baseline does diagnosis, plan and code in one answer."""

    diagnosis: str
    plan: list[str]
    source: str = Field(description="the complete new source file, not a diff")
    changes: str


# ----------------------------------------------------------------------------------------------- inputs


class ShapeLine(Model):
    dims: dict[str, int]
    dtype: str
    original_us: float | None = None
    candidate_us: float | None = None
    speedup: float | None = None
    pct_of_copy_ceiling: float | None = None


class ResultView(Model):
    """What an agent may know of an evaluation: test shapes only, never the held-out ones."""

    device: str
    built: bool
    build_log: str = ""
    correct: bool | None = None
    cases_run: int = 0
    first_failure: str | None = None
    geomean_speedup: float | None = None
    timing_method: str | None = None
    copy_ceiling_gbps: float | None = None
    shapes: list[ShapeLine] = Field(default_factory=list)
    resources: list[str] = Field(default_factory=list)
    error: str | None = None


class RoundView(Model):
    """One earlier round as the planner sees it."""

    round: int
    base_round: int | None
    status: str
    correct: bool | None
    geomean_speedup: float | None
    diagnosis: str | None
    suggestions: list[str]
    changes: str | None
    failure: str | None


class CandidateView(RoundView):
    """One earlier candidate as the planner sees it when rounds code K candidates."""

    candidate: int | None


class OpView(Model):
    """The op's contract as shown to agents (from the manifest, held-out shapes removed)."""

    op_id: str
    short_name: str
    form: str = Field(description="what a candidate file is: a Triton .py or a CUDA .cuh, and its entry points")
    dims: list[str]
    tensors: list[str]
    scalars: list[str]
    dtypes: list[str]
    relations: list[str]
    tolerances: dict[str, str]
    shapes: list[dict[str, int]] = Field(description="shapes the op is tested and timed on")
    distributions: list[str]


class SuiteInput(Model):
    op: OpView
    kernel_source: str


class ProfilingInput(Model):
    op: OpView
    round: int
    kernel_round: int
    kernel_source: str
    result: ResultView


class PlanningInput(Model):
    op: OpView
    round: int
    rounds_total: int
    kernel_round: int
    kernel_source: str
    result: ResultView
    diagnosis: Diagnosis | None
    history: list[RoundView]


class PlanningSetInput(PlanningInput):
    """K > 1: the history lists every candidate of every round, fastest correct first, then the failures."""

    directions: int = Field(description="how many distinct plans to give")
    history: list[CandidateView]  # type: ignore[assignment]


class CodingInput(Model):
    op: OpView
    round: int
    kernel_source: str
    plan: OptimizationPlan


class SingleAgentInput(Model):
    op: OpView
    round: int
    rounds_total: int
    kernel_round: int
    kernel_source: str
    result: ResultView
    history: list[RoundView]


class SingleAgentSetInput(SingleAgentInput):
    """K > 1 single agents: each knows it is one of K working from the same kernel at once."""

    candidate: int
    candidates_in_round: int
    history: list[CandidateView]  # type: ignore[assignment]


def render_input(model: BaseModel) -> str:
    """Markdown for the user message: sources in code fences (readable), everything else as JSON."""
    parts: list[str] = []
    data = model.model_dump(mode="json")
    for name, value in data.items():
        title = name.replace("_", " ")
        if name.endswith("source") and isinstance(value, str):
            parts.append(f"## {title}\n```\n{value}\n```")
        elif isinstance(value, (dict, list)):
            parts.append(f"## {title}\n```json\n{json.dumps(value, indent=1)}\n```")
        else:
            parts.append(f"## {title}\n{value}")
    return "\n\n".join(parts)
