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


def make_team(model: Model, tools: dict[str, FunctionTool], single: bool) -> Team:
    every_tool: list[Tool] = list(tools.values())
    if single:
        generalist = Agent(name="single", instructions=load_prompt("single"), model=model, tools=every_tool,
                           output_type=SingleAgentRound)
        # Same agent, same instructions and tools; only the shape of the answer differs for the suite job.
        return Team(testing=generalist.clone(output_type=SuiteProposal), profiling=None, planning=None,
                    coding=generalist, single=True)
    profiling_tools: list[Tool] = [t for name, t in tools.items()
                                   if name in ("run_timing", "resource_report", "nsight_compute")]
    return Team(
        testing=Agent(name="testing", instructions=load_prompt("testing"), model=model, output_type=SuiteProposal),
        profiling=Agent(name="profiling", instructions=load_prompt("profiling"), model=model,
                        tools=profiling_tools, output_type=Diagnosis),
        planning=Agent(name="planning", instructions=load_prompt("planning"), model=model,
                       output_type=OptimizationPlan),
        coding=Agent(name="coding", instructions=load_prompt("coding"), model=model,
                     tools=[tools["check_candidate"]], output_type=CandidateSource),
        single=False,
    )
