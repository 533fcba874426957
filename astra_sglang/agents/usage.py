"""What one agent run cost, read from the SDK: it adds every model response's ``Usage`` (the ``file:`` provider's
too) to the run's ``RunContextWrapper.usage``, so a step's tokens are the SDK's own sum, not a second one kept
beside it from our call records."""

from __future__ import annotations

from typing import Any

from agents import Agent, RunContextWrapper, RunHooks
from agents.items import TResponseInputItem
from agents.usage import Usage

from astra_sglang.agents.config import TokenCount


def token_count(usage: Usage) -> TokenCount:
    """The step record's form (``steps.jsonl`` keeps its schema, so old run folders still load and report)."""
    return TokenCount(requests=usage.requests, input_tokens=usage.input_tokens, output_tokens=usage.output_tokens)


class RunUsage(RunHooks[Any]):
    """The run's usage as the SDK keeps it, held from its first model call (``Runner.run(hooks=...)``): a run that
    raises (an unreadable reply, a model error) returns no RunResult, yet the calls before it were paid for."""

    def __init__(self) -> None:
        self._run: RunContextWrapper[Any] | None = None

    async def on_llm_start(self, context: RunContextWrapper[Any], agent: Agent[Any], system_prompt: str | None,
                           input_items: list[TResponseInputItem]) -> None:
        self._run = context

    def tokens(self) -> TokenCount:
        return TokenCount() if self._run is None else token_count(self._run.usage)
