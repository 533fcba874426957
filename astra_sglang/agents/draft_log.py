"""The on-disk log of one drafting session (``runs/drafts/<op>/<timestamp>/``) and the replay that resumes it.

Everything is written as it happens: the context the agent was given, every model call (request, response,
tokens), each draft and the verdict on it, and the op folder each draft produced. A session that never
validates loses nothing, and ``extract OP --draft --resume DIR`` replays the recorded model calls (same
requests, so the same answers, no tokens spent) until the conversation goes beyond the record.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.model_settings import ModelSettings
from agents.models.interface import Model, ModelTracing
from agents.tool import Tool
from agents.usage import Usage
from pydantic import Field

from astra_sglang.agents.config import TokenCount
from astra_sglang.agents.recording import ModelCallRecord, describe_request, jsonable
from astra_sglang.contract.base import Model as Record
from astra_sglang.contract.base import read_versioned, write_atomic
from astra_sglang.contract.op import canonical_op_id
from astra_sglang.errors import AstraError

STATUS_NAME = "draft.json"
STATUS_SCHEMA_VERSION = 1

Verdict = Literal["no_draft", "refused", "disagrees", "build_failed", "accepted", "pending_gpu"]


class AttemptRecord(Record):
    attempt: int
    verdict: Verdict
    detail: str = ""


class DraftStatus(Record):
    schema_version: int = STATUS_SCHEMA_VERSION
    op_id: str
    model: str
    created: str
    status: Literal["running", "accepted", "pending_gpu", "failed"] = "running"
    attempts: list[AttemptRecord] = Field(default_factory=list)
    folder: str | None = Field(default=None, description="the accepted op folder")
    message: str | None = None
    tokens: TokenCount = Field(default_factory=TokenCount)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class DraftLog:
    """A CallSink (agents/recording.py) plus the session's files."""

    def __init__(self, path: Path, status: DraftStatus) -> None:
        self.path = path
        self.status = status

    @classmethod
    def create(cls, root: Path, op_id: str, model: str) -> DraftLog:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-%f")
        path = Path(root) / op_id.replace(":", "_").replace("/", "_") / stamp
        try:
            path.mkdir(parents=True)
        except OSError as e:
            raise AstraError(f"cannot create the draft log folder {path}: {e.strerror or e} (choose another with "
                             "--drafts-dir)") from None
        log = cls(path, DraftStatus(op_id=op_id, model=model, created=_now()))
        log.save()
        return log

    @classmethod
    def open(cls, path: Path, op_id: str) -> DraftLog:
        path = Path(path)
        if not (path / STATUS_NAME).is_file():
            raise AstraError(f"{path} is not a draft log folder (no {STATUS_NAME}); give the folder "
                             "`extract --draft` printed")
        status = read_versioned(path / STATUS_NAME, DraftStatus, STATUS_SCHEMA_VERSION, AstraError, "draft log")
        if canonical_op_id(status.op_id) != op_id:  # a log written before the one op-id form: the same op
            raise AstraError(f"{path} is a draft of {canonical_op_id(status.op_id)}, not of {op_id}")
        status.op_id = op_id
        status.status, status.message, status.attempts = "running", None, []
        return cls(path, status)

    def save(self) -> None:
        write_atomic(self.path / STATUS_NAME, self.status.model_dump_json(indent=2) + "\n")

    def write(self, rel: str, text: str) -> Path:
        dest = self.path / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(dest, text)
        return dest

    def attempt_dir(self, attempt: int) -> Path:
        d = self.path / f"attempt-{attempt:02d}"
        d.mkdir(exist_ok=True)
        return d

    def note(self, attempt: int, verdict: Verdict, detail: str) -> None:
        self.status.attempts.append(AttemptRecord(attempt=attempt, verdict=verdict, detail=detail))
        self.write(f"attempt-{attempt:02d}/verdict.txt", f"{verdict}: {detail}\n")
        self.save()

    # CallSink --------------------------------------------------------------------------------------
    def record_call(self, record: ModelCallRecord) -> None:
        """``record.round`` is the attempt: each attempt's run is recorded under its own (drafting.py)."""
        calls = self.path / "calls"
        calls.mkdir(exist_ok=True)
        n = len(list(calls.glob("*.json"))) + 1
        write_atomic(calls / f"{n:05d}-attempt-{record.round or 0:02d}.json", record.model_dump_json(indent=1))
        self.status.tokens = self.status.tokens + record.tokens
        self.save()

    def answered_calls(self) -> list[ModelCallRecord]:
        """The recorded calls that got an answer, in the order they were made."""
        calls = sorted((self.path / "calls").glob("*.json")) if (self.path / "calls").is_dir() else []
        records = [ModelCallRecord.model_validate_json(p.read_text()) for p in calls]
        return [r for r in records if r.response is not None and r.error is None]


def _canonical(value: Any) -> Any:
    return json.loads(json.dumps(jsonable(value), default=str))


class ReplayModel(Model):
    """Answers from the record while the requests match it, in order; then from the live model."""

    def __init__(self, inner: Model, recorded: list[ModelCallRecord]) -> None:
        from openai.types.responses import ResponseOutputItem
        from pydantic import TypeAdapter

        self.inner = inner
        self.recorded = recorded
        self.replayed = 0
        self._live = not recorded
        self._items = TypeAdapter(list[ResponseOutputItem])

    def unreplayed(self) -> list[ModelCallRecord]:
        """What the next attempt's replay starts from: nothing once this one went past (or off) the record."""
        return [] if self._live else self.recorded[self.replayed:]

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
        if not self._live and self.replayed < len(self.recorded):
            request = _canonical(describe_request(system_instructions, input, tools, output_schema))
            record = self.recorded[self.replayed]
            if _canonical(record.request) == request:
                self.replayed += 1
                return ModelResponse(output=self._items.validate_python(record.response), usage=Usage(),
                                     response_id=None)
        self._live = True  # past the record (or off it): never go back to replaying
        return await self.inner.get_response(
            system_instructions, input, model_settings, tools, output_schema, handoffs, tracing,
            previous_response_id=previous_response_id, conversation_id=conversation_id, prompt=prompt)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("drafting never streams")
