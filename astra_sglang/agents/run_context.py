"""The run context of one agent run: which round, step and candidate it works for.

The loop hands it to ``Runner.run(context=...)``; the SDK gives it to the tools (``ctx: RunContextWrapper[
AgentContext]``), and the run's model is bound to it for the call records (``RecordingModel.scoped``). One per run,
so K coding agents running at once each check beside, and record under, their own candidate: nothing shared is set
before a run and read back from inside it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AgentContext:
    round: int
    step: str
    agent: str
    candidate: int | None = None  # which of the round's K candidates (K > 1)

    @property
    def call_step(self) -> str:
        """The step as ``calls/`` and its replay key name it: a K-candidate round's agents apart (``coding.c2``)."""
        return self.step if self.candidate is None else f"{self.step}.c{self.candidate}"
