"""``file:DIR`` model provider: each model request becomes a JSON file, each answer a file someone else writes.

For hosts that cannot reach a model: a person reviewing every step, or a gateway on another machine that
forwards the request (it is a Chat Completions request body, ready to POST) and writes the reply back.

Files in DIR:
- ``NNNN-<hash>.request.json``: ``{"model", "messages", "tools", "response_format", ...}``.
- ``NNNN-<hash>.response.json`` (written by the other side): either a full Chat Completions response
  (``{"choices": [{"message": ...}], "usage": ...}``) or just the message
  ``{"content": "...", "tool_calls": [{"name": "...", "arguments": {...} or "json", "id": optional}]}``.
  Write it atomically (write elsewhere, then rename) or it may be read half-written and retried.

The hash is of the request content: a resumed run that makes the same request finds the same files and
reuses an answer already given, so nobody is asked twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents.agent_output import AgentOutputSchemaBase
from agents.exceptions import ModelBehaviorError
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.model_settings import ModelSettings
from agents.models.chatcmpl_converter import Converter
from agents.models.interface import Model, ModelTracing
from agents.tool import Tool
from agents.usage import Usage
from openai.types.chat import ChatCompletionMessage
from openai.types.chat.chat_completion_message_function_tool_call import (
    ChatCompletionMessageFunctionToolCall,
    Function,
)

from astra_sglang.contract.base import write_atomic

README = """\
Model requests from astra-sglang's optimizer (file: provider).
For each NNNN-<hash>.request.json write NNNN-<hash>.response.json next to it (atomically: write a
temporary file, then rename). The request is a Chat Completions request body. The response is either a
full Chat Completions response or {"content": "...", "tool_calls": [{"name": "...", "arguments": {...}}]}.
When `response_format` is present, `content` must be JSON matching its schema.
"""


class FileModelTimeout(TimeoutError):
    """No response file appeared in time: the step fails like a model server that timed out."""


def parse_response(raw: dict[str, Any], key: str) -> tuple[ChatCompletionMessage, Usage]:
    """Accept a full Chat Completions response or a bare message; tool calls get ids if they lack them."""
    usage_raw = raw.get("usage") or {}
    if "choices" in raw:
        if not raw["choices"]:
            raise ModelBehaviorError("response file has an empty 'choices' list")
        raw = raw["choices"][0].get("message", {})
    calls = []
    for i, call in enumerate(raw.get("tool_calls") or []):
        fn = call.get("function", call)
        args = fn.get("arguments", {})
        calls.append(ChatCompletionMessageFunctionToolCall(
            id=call.get("id") or f"call_{key}_{i}", type="function",
            function=Function(name=fn["name"], arguments=args if isinstance(args, str) else json.dumps(args))))
    content = raw.get("content")
    if content is not None and not isinstance(content, str):
        content = json.dumps(content)  # a person may paste the structured output as an object
    message = ChatCompletionMessage(role="assistant", content=content, tool_calls=calls or None)
    usage = Usage(requests=1, input_tokens=int(usage_raw.get("prompt_tokens", 0) or 0),
                  output_tokens=int(usage_raw.get("completion_tokens", 0) or 0))
    usage.total_tokens = usage.input_tokens + usage.output_tokens
    return message, usage


class FileModel(Model):
    def __init__(self, directory: Path, model_name: str = "file", timeout_s: float = 3600.0,
                 poll_s: float = 0.2) -> None:
        self.directory = Path(directory)
        self.model_name = model_name
        self.timeout_s = timeout_s
        self.poll_s = poll_s

    def _request_body(self, system: str | None, input: str | list[TResponseInputItem], tools: list[Tool],
                      output_schema: AgentOutputSchemaBase | None) -> dict[str, Any]:
        messages: list[Any] = []
        if system:
            messages.append({"role": "system", "content": system})
        messages.extend(Converter.items_to_messages(input))
        body: dict[str, Any] = {"model": self.model_name, "messages": messages}
        if tools:
            body["tools"] = [Converter.tool_to_openai(t) for t in tools]
        fmt = Converter.convert_response_format(output_schema)
        if isinstance(fmt, dict):
            body["response_format"] = fmt
        return json.loads(json.dumps(body, default=str))

    def _slot(self, key: str) -> Path:
        """The file stem for this request: the existing one if the same request was made before."""
        existing = sorted(self.directory.glob(f"*-{key}.request.json"))
        if existing:
            return existing[0].with_name(existing[0].name[: -len(".request.json")])
        n = len(list(self.directory.glob("*.request.json"))) + 1
        return self.directory / f"{n:04d}-{key}"

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
        self.directory.mkdir(parents=True, exist_ok=True)
        readme = self.directory / "README.txt"
        if not readme.exists():
            write_atomic(readme, README)
        body = self._request_body(system_instructions, input, tools, output_schema)
        key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
        stem = self._slot(key)
        request_path = stem.with_name(stem.name + ".request.json")
        response_path = stem.with_name(stem.name + ".response.json")
        if not request_path.exists():
            write_atomic(request_path, json.dumps(body, indent=1))
        deadline = time.monotonic() + self.timeout_s
        last_error = ""
        while True:
            if response_path.exists():
                try:
                    raw = json.loads(response_path.read_text())
                    message, usage = parse_response(raw, key)
                    break
                except (json.JSONDecodeError, KeyError, TypeError, ValueError, ModelBehaviorError) as e:
                    last_error = f"{type(e).__name__}: {e}"  # maybe half-written: wait for a rewrite
            if time.monotonic() > deadline:
                detail = f" (last read: {last_error})" if last_error else ""
                raise FileModelTimeout(f"no valid {response_path.name} in {self.directory} after "
                                       f"{self.timeout_s:.0f} s{detail}")
            await asyncio.sleep(self.poll_s)
        output = Converter.message_to_output_items(message)
        return ModelResponse(output=output, usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the file: provider does not stream")
