"""A step's tokens are the SDK's own sum over the run's model calls (``RunContextWrapper.usage``), the ``file:``
provider's included; a run that fails still says what its earlier calls cost; old step records still report."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from loop_support import answer_files

from astra_sglang.agents.config import RetryPolicy, TokenCount
from astra_sglang.agents.file_provider import FileModel
from astra_sglang.agents.recording import ModelCallFailed, ModelCallRecord, RecordingModel
from astra_sglang.agents.run_context import AgentContext
from astra_sglang.agents.schemas import CandidateSource
from astra_sglang.agents.usage import RunUsage, token_count
from astra_sglang.loop.records import StepRecord
from astra_sglang.loop.report import _tokens

TOOL_TURN = {"tool_calls": [{"name": "check_candidate", "arguments": {"source": "x = 1"}}],
             "usage": {"prompt_tokens": 10, "completion_tokens": 3}}
FINAL = {"content": json.dumps({"source": "x = 2", "changes": "none"}),
         "usage": {"prompt_tokens": 7, "completion_tokens": 2}}


@function_tool
def check_candidate(source: str) -> str:
    """Check a candidate.

    Args:
        source: the complete source.
    """
    return "BUILD OK"


class _Calls:
    """Where RecordingModel puts its call records (the run folder's role)."""

    def __init__(self) -> None:
        self.records: list[ModelCallRecord] = []

    def record_call(self, record: ModelCallRecord) -> None:
        self.records.append(record)


def _run(directory: Path, answers: list[dict[str, Any]], model: Any, hooks: RunUsage | None = None) -> Any:
    stop = threading.Event()

    def answer(body: dict) -> dict:
        if len(answers) == 1:
            stop.set()  # the last scripted answer: any later request goes unanswered
        return answers.pop(0)

    t = threading.Thread(target=answer_files, args=(directory, answer, stop), daemon=True)
    t.start()
    agent = Agent(name="coding", instructions="# Role: coding agent", model=model, tools=[check_candidate],
                  output_type=CandidateSource)
    try:
        return asyncio.run(Runner.run(agent, "improve it", run_config=RunConfig(tracing_disabled=True), hooks=hooks))
    finally:
        stop.set()
        t.join(timeout=5)


def test_a_steps_tokens_are_the_sdks_usage_of_the_run_file_provider_included(tmp_path: Path):
    result = _run(tmp_path, [TOOL_TURN, FINAL], FileModel(tmp_path, timeout_s=20, poll_s=0.05))
    assert token_count(result.context_wrapper.usage) == TokenCount(requests=2, input_tokens=17, output_tokens=5)


def test_a_provider_reporting_no_usage_still_counts_its_requests(tmp_path: Path):
    silent = [{k: v for k, v in a.items() if k != "usage"} for a in (TOOL_TURN, FINAL)]
    result = _run(tmp_path, silent, FileModel(tmp_path, timeout_s=20, poll_s=0.05))
    tokens = token_count(result.context_wrapper.usage)
    assert tokens == TokenCount(requests=2)
    step = StepRecord(round=1, step="coding", agent="coding", started="t", wall_s=1.0, status="ok", tokens=tokens)
    assert _tokens([step]) == "not reported by the model provider"


def test_a_run_that_fails_mid_way_says_what_its_earlier_calls_cost(tmp_path: Path):
    calls = _Calls()
    recorder = RecordingModel(FileModel(tmp_path, timeout_s=0.5, poll_s=0.05), calls, RetryPolicy(retries=0))
    model = recorder.scoped(AgentContext(round=1, step="coding", agent="coding"))
    spent = RunUsage()
    assert spent.tokens() == TokenCount()  # no model call yet: nothing spent
    with pytest.raises(ModelCallFailed):  # not an SDK exception: it carries no run context of its own
        _run(tmp_path, [TOOL_TURN], model, spent)  # the second request is never answered: timed out, no retry left
    assert spent.tokens() == TokenCount(requests=1, input_tokens=10, output_tokens=3)
    assert [(r.round, r.step, r.error is None) for r in calls.records] == [(1, "coding", True), (1, "coding", False)]


def test_step_records_written_before_the_change_still_load_and_report():
    old = ('{"round":1,"step":"coding","agent":"coding","attempt":0,"started":"2026-12-01T10:00:00+00:00",'
           '"wall_s":3.5,"tokens":{"requests":2,"input_tokens":120,"output_tokens":30},"status":"ok","error":null}')
    step = StepRecord.model_validate_json(old)
    assert step.tokens == TokenCount(requests=2, input_tokens=120, output_tokens=30)
    assert _tokens([step]) == "120 in / 30 out"
