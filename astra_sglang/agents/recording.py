"""A Model wrapper that records every request/response and retries transient failures with backoff.

One wrapper for every provider (OpenAI-compatible HTTP, LiteLLM, ``file:``) so the run folder gets the same
record of every prompt and response whatever the transport, and the retry policy is ours, logged, and the
same everywhere (the OpenAI client's own retries are switched off).

The records also replay: a resumed run that makes a request an earlier session already got an answer to
(same round, step, agent and request) is given that answer again instead of asking the model. A step that was
in flight at a kill (a coding agent with K-1 of its turns done) so repeats no finished model call.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.model_settings import ModelSettings
from agents.models.interface import Model, ModelTracing
from agents.tool import FunctionTool, Tool
from agents.usage import Usage
from openai.types.responses import ResponseOutputItem
from pydantic import Field, TypeAdapter

from astra_sglang.agents.config import RetryPolicy, TokenCount
from astra_sglang.agents.run_context import AgentContext
from astra_sglang.contract.base import Model as Record


class ModelCallRecord(Record):
    """One attempt of one model request, as written to the run folder."""


    seq: int
    round: int | None
    step: str
    agent: str
    attempt: int
    started: str
    wall_s: float
    request: dict[str, Any]
    response: list[dict[str, Any]] | None = None
    tokens: TokenCount = Field(default_factory=TokenCount)
    error: str | None = None


class CallSink(Protocol):
    """Where records go."""

    def record_call(self, record: ModelCallRecord) -> None: ...


class ModelCallFailed(Exception):
    """The model could not be reached or kept failing after all retries: the step fails, not the run."""


class ModelAuthFailed(Exception):
    """The server rejected the credentials mid-run: no point in continuing."""


def jsonable(value: Any) -> Any:
    """Input/output items are a mix of dicts and pydantic objects; records must be plain JSON."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def describe_tools(tools: list[Tool]) -> list[dict[str, Any]]:
    out = []
    for tool in tools:
        if isinstance(tool, FunctionTool):
            out.append({"name": tool.name, "description": tool.description, "parameters": tool.params_json_schema})
        else:
            out.append({"name": getattr(tool, "name", type(tool).__name__)})
    return out


def describe_request(system: str | None, input: Any, tools: list[Tool],
                     output_schema: AgentOutputSchemaBase | None) -> dict[str, Any]:
    schema = None
    if output_schema is not None and not output_schema.is_plain_text():
        schema = {"name": output_schema.name(), "strict": output_schema.is_strict_json_schema(),
                  "schema": output_schema.json_schema()}
    return {"system": system, "input": jsonable(input), "tools": describe_tools(tools), "output_schema": schema}


def classify(error: BaseException) -> str:
    """'retry' for transient transport failures, 'auth' for rejected credentials, else 'fail'."""
    import openai

    if isinstance(error, (openai.AuthenticationError, openai.PermissionDeniedError)):
        return "auth"
    if isinstance(error, (openai.APITimeoutError, openai.APIConnectionError, asyncio.TimeoutError,
                          TimeoutError, ConnectionError)):
        return "retry"
    if isinstance(error, openai.APIStatusError):
        return "retry" if error.status_code >= 500 or error.status_code in (408, 409, 429) else "fail"
    for name in ("httpx2", "httpx"):  # openai>=3 ships httpx2; LiteLLM may raise plain httpx errors
        try:
            mod = __import__(name)
        except ImportError:
            continue
        if isinstance(error, (mod.TimeoutException, mod.TransportError)):
            return "retry"
    return "fail"


def short_error(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if len(text) < 600 else text[:600] + "..."


def _replay_key(rnd: int | None, step: str, agent: str, request: dict[str, Any]) -> str:
    return json.dumps([rnd, step, agent, request], sort_keys=True)


def load_answered(calls_dir: Path) -> list[ModelCallRecord]:
    """The answered calls an earlier session of this run recorded (``calls/``), oldest first."""
    out = []
    for path in sorted(Path(calls_dir).glob("*.json")):
        try:
            record = ModelCallRecord.model_validate_json(path.read_text())
        except (OSError, ValueError):
            continue  # a torn record is a call that has to be made again
        if record.response is not None and record.error is None:
            out.append(record)
    return out


_OUTPUT_ITEM: TypeAdapter[Any] = TypeAdapter(ResponseOutputItem)


class RecordingModel(Model):
    """``scope``: the agent run whose calls these are; each run gets its own view (``scoped``), so K runs at once
    never record under, or replay, each other's."""

    def __init__(self, inner: Model, sink: CallSink, policy: RetryPolicy,
                 sleep: Callable[[float], Any] = asyncio.sleep, replay: list[ModelCallRecord] | None = None) -> None:
        self.inner = inner
        self.sink = sink
        self.policy = policy
        self.scope: AgentContext | None = None
        self._sleep = sleep
        self._seq = itertools.count(1)
        self._replay: dict[str, list[ModelCallRecord]] = {}
        for record in replay or []:
            key = _replay_key(record.round, record.step, record.agent, record.request)
            self._replay.setdefault(key, []).append(record)

    def scoped(self, scope: AgentContext) -> RecordingModel:
        """This recorder for one agent run (``RunConfig.model``): the same transport, sink, call numbering and
        replayable answers, its records under the run's own round/step/agent, however many runs are in flight."""
        view = copy.copy(self)
        view.scope = scope
        return view

    def _replayed(self, rnd: int | None, step: str, agent: str, request: dict[str, Any]) -> ModelResponse | None:
        answers = self._replay.get(_replay_key(rnd, step, agent, request))
        if not answers:
            return None
        record = answers.pop(0)
        try:
            output = [_OUTPUT_ITEM.validate_python(item) for item in record.response or []]
        except ValueError:
            return None  # recorded by another SDK version: ask again
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    async def close(self) -> None:
        await self.inner.close()
        client = getattr(self.inner, "_client", None)  # the OpenAI model does not close its own client
        if client is not None and hasattr(client, "close"):
            await client.close()

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> ModelResponse:
        request = describe_request(system_instructions, input, tools, output_schema)
        rnd, step, agent = (None, "", "") if self.scope is None else (
            self.scope.round, self.scope.call_step, self.scope.agent)
        replayed = self._replayed(rnd, step, agent, request)
        if replayed is not None:  # answered before a kill: the same answer, no new call, no new tokens
            return replayed
        last: BaseException | None = None
        for attempt in range(self.policy.retries + 1):
            seq = next(self._seq)
            started = datetime.now(timezone.utc).isoformat(timespec="seconds")
            t0 = time.monotonic()
            try:
                response = await self.inner.get_response(
                    system_instructions, input, model_settings, tools, output_schema, handoffs, tracing,
                    previous_response_id=previous_response_id, conversation_id=conversation_id, prompt=prompt)
            except Exception as e:  # classified below; nothing is swallowed silently
                kind = classify(e)
                self.sink.record_call(ModelCallRecord(
                    seq=seq, round=rnd, step=step, agent=agent, attempt=attempt, started=started,
                    wall_s=time.monotonic() - t0, request=request, error=short_error(e)))
                if kind == "auth":
                    raise ModelAuthFailed(f"the model server rejected the credentials: {short_error(e)}") from e
                if kind != "retry":
                    raise
                last = e
                if attempt < self.policy.retries:
                    await self._sleep(self.policy.delay(attempt))
                continue
            usage = response.usage
            self.sink.record_call(ModelCallRecord(
                seq=seq, round=rnd, step=step, agent=agent, attempt=attempt, started=started,
                wall_s=time.monotonic() - t0, request=request, response=jsonable(response.output),
                tokens=TokenCount(requests=1, input_tokens=usage.input_tokens, output_tokens=usage.output_tokens)))
            return response
        assert last is not None
        raise ModelCallFailed(f"model request failed after {self.policy.retries + 1} attempts: {short_error(last)}")

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the Astra loop never streams")
