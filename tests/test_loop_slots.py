"""K coding agents of one round run at once: each one's check_candidate calls, model call records and step
records must name its own candidate. The scripted model holds both agents' first turns until both have asked, so
both tool calls run while both agents are live: a round/candidate slot shared between them would send one
agent's check beside the other's candidate."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any, cast

from agents.items import ModelResponse
from agents.models.interface import Model
from agents.testing import assistant_message, function_call
from agents.usage import Usage
from rich.console import Console

from astra_sglang.agents.config import RetryPolicy, TokenCount
from astra_sglang.agents.recording import RecordingModel
from astra_sglang.contract.op import load_manifest
from astra_sglang.loop.optimizer import Optimizer
from astra_sglang.loop.records import CheckReport, LoopOptions, RunMeta, StepRecord
from astra_sglang.loop.runfolder import RunFolder, now_iso
from astra_sglang.loop.view import LiveView

REPO = Path(__file__).resolve().parents[1]
OP_DIR = REPO / "extracted" / "merge_state"


def _source(j: int, what: str) -> str:
    return f"# candidate {j}: {what}\n"


class TwoAgentsAtOnce(Model):
    """Candidate j's agent: first turn a check_candidate call (held until both agents asked), then its answer.
    Each call reports 10 + j input tokens, so a step's tokens show whose calls were counted."""

    def __init__(self) -> None:
        self.first_turns = 0
        self.both_asked = asyncio.Event()

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        text = json.dumps(input, default=str)
        j = 0 if "plan-0" in text else 1
        usage = Usage(requests=1, input_tokens=10 + j, output_tokens=1, total_tokens=11 + j)
        if "function_call_output" not in text:
            self.first_turns += 1
            if self.first_turns == 2:
                self.both_asked.set()
            await asyncio.wait_for(self.both_asked.wait(), 30)
            call = function_call("check_candidate", {"source": _source(j, "checked")}, call_id=f"call-{j}")
            return ModelResponse(output=[call], usage=usage, response_id=None)
        answer = json.dumps({"source": _source(j, "answered"), "changes": f"plan-{j}"})
        return ModelResponse(output=[assistant_message(answer)], usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class Checks:
    """The evaluator's quick check, remembering which file it was asked about."""

    description = "test checks"

    def __init__(self) -> None:
        self.paths: list[Path] = []

    def check(self, path: Path, spec: Any) -> CheckReport:
        self.paths.append(path)
        return CheckReport(built=True, how="static", log=f"checked {path.name}")


def test_two_concurrent_candidate_agents_check_beside_their_own_candidates(tmp_path: Path):
    manifest = load_manifest(OP_DIR)
    opts = LoopOptions(candidates=2)
    meta = RunMeta(run_id="slots", op=manifest.short_name, op_id=manifest.op_id, op_dir=str(OP_DIR), model="test",
                   rounds=1, mode="multi-agent", created=now_iso(), updated=now_iso(), options=opts)
    folder = RunFolder.create(tmp_path / "runs", manifest.short_name, "slots")
    model = RecordingModel(TwoAgentsAtOnce(), folder, RetryPolicy(retries=0))
    checks = Checks()
    view = LiveView("slots", 1, console=Console(file=io.StringIO()), live=False)
    optimizer = Optimizer(folder, meta, manifest, OP_DIR, cast(Any, checks), model, view)

    async def both() -> list[Any]:
        return list(await asyncio.gather(*(optimizer._code_with_fixes(1, "coding", f"plan-{j}", j)
                                           for j in range(2))))

    outcomes = asyncio.run(both())

    for j, outcome in enumerate(outcomes):
        assert outcome.built and outcome.source == _source(j, "answered")
        tool_checks = sorted((folder.round_dir(1) / f"c{j}").glob("tool-check*.py"))
        assert [p.read_text() for p in tool_checks] == [_source(j, "checked")], j
    assert len(checks.paths) == 4  # two tool checks, two checks of the answers

    steps = [StepRecord.model_validate_json(line) for line in (folder.path / "steps.jsonl").read_text().splitlines()]
    for s in steps:
        if s.step.startswith("check:tool-check"):
            name = s.step.removeprefix("check:")
            assert (folder.round_dir(1) / f"c{s.candidate}" / name).is_file(), s
    coding = {s.candidate: s.tokens for s in steps if s.step == "coding"}
    assert coding == {j: TokenCount(requests=2, input_tokens=2 * (10 + j), output_tokens=2) for j in range(2)}

    calls = [json.loads(p.read_text()) for p in sorted((folder.path / "calls").glob("*.json"))]
    assert len(calls) == 4
    for call in calls:
        j = 0 if "plan-0" in json.dumps(call["request"]["input"]) else 1
        assert (call["round"], call["step"], call["agent"]) == (1, f"coding.c{j}", "coding")
