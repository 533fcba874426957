"""Function tools the agents call. Each is a thin shim over a backend the loop provides.

The loop owns the state (current kernel, evaluator, run folder); tools only expose it, so a tool call is
recorded, cached and checkpointed the same way as everything else the loop does. A tool that writes beside a
candidate learns which one from the run context the SDK hands it, never from state shared between the K agents.
"""

from __future__ import annotations

from typing import Protocol

from agents import FunctionTool, RunContextWrapper, function_tool

from astra_sglang.agents.run_context import AgentContext


class ToolBackend(Protocol):
    def check_candidate(self, source: str, run: AgentContext) -> str: ...

    def run_timing(self) -> str: ...

    def resource_report(self) -> str: ...

    def nsight_compute(self) -> str: ...


def make_tools(backend: ToolBackend, ncu: bool) -> dict[str, FunctionTool]:
    @function_tool(name_override="check_candidate")
    def check_candidate(ctx: RunContextWrapper[AgentContext], source: str) -> str:
        """Build a candidate and run the correctness checks on the test shapes; returns the compiler
        output on a build failure, else the correctness verdict with the first failing case.

        Args:
            source: the complete candidate source file (not a diff).
        """
        return backend.check_candidate(source, ctx.context)

    @function_tool(name_override="run_timing")
    def run_timing() -> str:
        """The harness's timing of the current kernel against the original on the timed shapes (measured
        when the kernel was evaluated): per-shape microseconds, speedup, bytes moved, GB/s and % of the
        device's measured copy bandwidth."""
        return backend.run_timing()

    @function_tool(name_override="resource_report")
    def resource_report() -> str:
        """The compiler's resource report for the current kernel: registers per thread, spills,
        shared memory, stack frame, per compiled kernel."""
        return backend.resource_report()

    @function_tool(name_override="nsight_compute")
    def nsight_compute() -> str:
        """Nsight Compute counters for the current kernel on one timed shape (throughput, occupancy,
        stall reasons), where the host has ncu and a GPU."""
        return backend.nsight_compute()

    tools = {"check_candidate": check_candidate, "run_timing": run_timing, "resource_report": resource_report}
    if ncu:
        tools["nsight_compute"] = nsight_compute
    return tools
