"""What one agent run cost, read from the SDK: it adds every model response's ``Usage`` (the ``file:`` provider's
too) to the run's ``RunContextWrapper.usage``, so a step's tokens are the SDK's own sum, not a second one kept
beside it from our call records."""

from __future__ import annotations

from agents.exceptions import AgentsException
from agents.usage import Usage

from astra_sglang.agents.config import TokenCount


def token_count(usage: Usage) -> TokenCount:
    """The step record's form (``steps.jsonl`` keeps its schema, so old run folders still load and report)."""
    return TokenCount(requests=usage.requests, input_tokens=usage.input_tokens, output_tokens=usage.output_tokens)


def failed_run_tokens(error: BaseException) -> TokenCount:
    """What a run that raised had spent before it did: the SDK hands its run context back on its own exceptions
    (ours from the model, ModelCallFailed and ModelAuthFailed, are such); anything else carries none."""
    run = error.run_data if isinstance(error, AgentsException) else None
    return token_count(run.context_wrapper.usage) if run is not None else TokenCount()
