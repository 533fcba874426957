"""The agents: four specialists (the paper's team) or one generalist with the same tools (its baseline)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents import Agent, FunctionTool, Tool
from agents.models.interface import Model

from astra_sglang.agents.prompts import load_prompt
from astra_sglang.agents.schemas import (
    CandidateSource,
    Diagnosis,
    OptimizationPlan,
    PlanSet,
    SingleAgentRound,
    SuiteProposal,
)


@dataclass
class Team:
    testing: Agent[Any]
    profiling: Agent[Any] | None
    planning: Agent[Any] | None
    coding: Agent[Any]
    single: bool
    candidates: int = 1


def make_team(model: Model, tools: dict[str, FunctionTool], single: bool, candidates: int = 1) -> Team:
    """``candidates`` > 1: the planner answers K plans (a PlanSet) and is told why; the single agent is told
    it is one of K. With one candidate the agents are exactly the paper's."""
    every_tool: list[Tool] = list(tools.values())
    several = candidates > 1
    if single:
        generalist = Agent(name="single", instructions=load_prompt("single"), model=model, tools=every_tool,
                           output_type=SingleAgentRound)
        # Same agent, same instructions and tools; only the shape of the answer differs for the suite job.
        coder = generalist.clone(instructions=load_prompt("single") + load_prompt("single_set")) if several \
            else generalist
        return Team(testing=generalist.clone(output_type=SuiteProposal), profiling=None, planning=None,
                    coding=coder, single=True, candidates=candidates)
    profiling_tools: list[Tool] = [t for name, t in tools.items()
                                   if name in ("run_timing", "resource_report", "nsight_compute")]
    return Team(
        testing=Agent(name="testing", instructions=load_prompt("testing"), model=model, output_type=SuiteProposal),
        profiling=Agent(name="profiling", instructions=load_prompt("profiling"), model=model,
                        tools=profiling_tools, output_type=Diagnosis),
        planning=Agent(name="planning", model=model,
                       instructions=load_prompt("planning") + (load_prompt("planning_set") if several else ""),
                       output_type=PlanSet if several else OptimizationPlan),
        coding=Agent(name="coding", instructions=load_prompt("coding"), model=model,
                     tools=[tools["check_candidate"]], output_type=CandidateSource),
        single=False,
        candidates=candidates,
    )
