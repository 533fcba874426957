"""Fast checks of the agents' plumbing: file: provider, retry classification, form checks, suite
validation, base/winner choice, prompts. No harness run here (the loop tests do that)."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import httpx2 as httpx
import openai
import pytest
from agents import Agent, RunConfig, Runner, function_tool
from fake_openai_server import ROLE_RE
from h_fixtures.ops import make_h_merge
from loop_support import answer_files

from astra_sglang.agents.file_provider import (
    FileModel,
    parse_response,
)
from astra_sglang.agents.prompts import ROLES, load_prompt
from astra_sglang.agents.recording import classify
from astra_sglang.agents.schemas import CandidateSource, ProposedCase, SuiteProposal
from astra_sglang.contract.op import load_manifest
from astra_sglang.loop.agent_views import op_view, validate_suite
from astra_sglang.loop.evaluator import to_eval_config
from astra_sglang.loop.records import EvalSpec, RoundRecord
from astra_sglang.loop.static_check import check_source
from astra_sglang.loop.winner import pick_base, ranked


@pytest.fixture()
def h_merge(tmp_path: Path) -> Path:
    return make_h_merge(tmp_path)


def test_every_prompt_names_its_role_for_routing():
    for role in ROLES:
        m = ROLE_RE.search(load_prompt(role))
        assert m and m.group(1) == role


def test_file_provider_round_trip_with_tool_call_and_schema(tmp_path: Path):
    calls: list[str] = []

    @function_tool
    def check_candidate(source: str) -> str:
        """Check a candidate.

        Args:
            source: the complete source.
        """
        calls.append(source)
        return "BUILD OK"

    answers = [{"tool_calls": [{"name": "check_candidate", "arguments": {"source": "x = 1"}}]},
               {"content": json.dumps({"source": "x = 2", "changes": "none"}),
                "usage": {"prompt_tokens": 10, "completion_tokens": 3}}]
    stop = threading.Event()
    t = threading.Thread(target=answer_files, args=(tmp_path, lambda body: answers.pop(0), stop), daemon=True)
    t.start()
    try:
        model = FileModel(tmp_path, timeout_s=20, poll_s=0.05)
        agent = Agent(name="coding", instructions="# Role: coding agent", model=model, tools=[check_candidate],
                      output_type=CandidateSource)
        result = asyncio.run(Runner.run(agent, "improve it", run_config=RunConfig(tracing_disabled=True)))
    finally:
        stop.set()
    assert result.final_output == CandidateSource(source="x = 2", changes="none")
    assert calls == ["x = 1"]
    requests = sorted(tmp_path.glob("*.request.json"))
    assert len(requests) == 2
    first = json.loads(requests[0].read_text())
    assert first["messages"][0] == {"role": "system", "content": "# Role: coding agent"}
    assert first["tools"][0]["function"]["name"] == "check_candidate"
    assert first["response_format"]["json_schema"]["schema"]["required"] == ["source", "changes"]
    second = json.loads(requests[1].read_text())
    assert second["messages"][-1]["role"] == "tool" and second["messages"][-1]["content"] == "BUILD OK"

    # The same requests again (a resumed run) reuse the answers on disk instead of asking again.
    again = asyncio.run(Runner.run(
        Agent(name="coding", instructions="# Role: coding agent",
              model=FileModel(tmp_path, timeout_s=2), tools=[check_candidate],
              output_type=CandidateSource),
        "improve it", run_config=RunConfig(tracing_disabled=True)))
    assert again.final_output.source == "x = 2"
    assert len(list(tmp_path.glob("*.request.json"))) == 2
    assert calls == ["x = 1", "x = 1"]


def test_file_provider_times_out_cleanly(tmp_path: Path):
    model = FileModel(tmp_path, timeout_s=0.3, poll_s=0.05)
    agent = Agent(name="planning", instructions="# Role: planning agent", model=model)
    with pytest.raises(TimeoutError, match="no valid .*response.json"):
        asyncio.run(Runner.run(agent, "plan", run_config=RunConfig(tracing_disabled=True)))


def test_parse_response_accepts_full_completion_and_bare_message():
    msg, usage = parse_response({"choices": [{"message": {"role": "assistant", "content": "hi"}}],
                                 "usage": {"prompt_tokens": 4, "completion_tokens": 2}}, "k")
    assert msg.content == "hi" and usage.input_tokens == 4 and usage.output_tokens == 2
    msg, _ = parse_response({"tool_calls": [{"name": "run_timing", "arguments": "{}"}]}, "k")
    assert msg.tool_calls[0].function.name == "run_timing" and msg.tool_calls[0].id


def test_litellm_models_without_litellm_say_how_to_get_it(monkeypatch: pytest.MonkeyPatch):
    from astra_sglang.agents.config import ModelOptions
    from astra_sglang.agents.models import build_model
    from astra_sglang.errors import AstraError

    try:
        import litellm  # noqa: F401
    except ImportError:
        monkeypatch.setenv("SOME_KEY", "k")
        with pytest.raises(AstraError, match=r"openai-agents\[litellm\]"):
            build_model(ModelOptions(model="litellm/anthropic/claude-sonnet", api_key_env="SOME_KEY"))
    else:
        pytest.skip("litellm is installed here")


def test_retry_classification():
    req = httpx.Request("POST", "http://x/v1/chat/completions")
    assert classify(openai.InternalServerError("boom", response=httpx.Response(500, request=req), body=None)) == "retry"
    assert classify(openai.RateLimitError("slow", response=httpx.Response(429, request=req), body=None)) == "retry"
    assert classify(openai.APITimeoutError(request=req)) == "retry"
    assert classify(openai.AuthenticationError("no", response=httpx.Response(401, request=req), body=None)) == "auth"
    assert classify(openai.BadRequestError("bad", response=httpx.Response(400, request=req), body=None)) == "fail"
    assert classify(ValueError("x")) == "fail"


def test_static_check_rejects_prose_renames_and_sglang_imports(h_merge: Path):
    m = load_manifest(h_merge)
    original = (h_merge / "h_merge.py").read_text()
    assert check_source(original, h_merge, m) is None
    assert "SyntaxError" in (check_source("Here is the faster kernel: tile the rows.", h_merge, m) or "")
    renamed_entry = original.replace("def merge_state_triton", "def merge2")
    assert "merge_state_triton" in (check_source(renamed_entry, h_merge, m) or "")
    assert "sglang" in (check_source("import sglang\n" + original, h_merge, m) or "")
    renamed = original.replace("output_lse=None", "out_lse=None").replace("output_lse: ", "out_lse: ")
    if renamed != original:
        assert "parameters" in (check_source(renamed, h_merge, m) or "")


def test_suite_validation_keeps_the_contract(h_merge: Path):
    m = load_manifest(h_merge)

    def case(t, h, d, dtype="bfloat16"):
        return ProposedCase.model_validate({"dims": [{"name": "T", "value": t}, {"name": "H", "value": h},
                                                     {"name": "D", "value": d}], "dtype": dtype,
                                            "distribution": "normal", "why": ""})

    ok, bad = validate_suite([case(3, 2, 8), case(0, 1, 8), case(1, 1, 12), case(1, 1, 8, "int8"),
                              case(4096, 64, 128)], m, max_elems=4096)
    assert ok == [case(3, 2, 8)]
    assert [b.split(":")[-1].strip() for b in bad][:2] == ["T=0 outside its constraints",
                                                            "D=12 outside its constraints"]
    assert "dtype int8" in bad[2] and "too large" in bad[3]
    assert SuiteProposal.model_json_schema()["required"] == ["cases", "rationale"]
    # Accepted cases reach the harness as extra visible cases (the harness decides correctness).
    config = to_eval_config(EvalSpec(shapes="test", suite=ok))
    assert [(c.dims, c.dtype, c.distribution) for c in config.extra_cases] == [
        ({"T": 3, "H": 2, "D": 8}, "bfloat16", "normal")]
    assert op_view(m).shapes[0] == {"T": 512, "H": 40, "D": 128}


def _rec(rnd: int, correct, speed=None, suspect=()) -> RoundRecord:
    return RoundRecord(round=rnd, status="ok" if correct else "incorrect", correct=correct, geomean_speedup=speed,
                       timing_suspect=list(suspect))


def test_base_and_ranking_only_trust_correct_unsuspect_candidates():
    recs = [_rec(0, True, 1.0), _rec(1, False, 9.0), _rec(2, True, 1.4), _rec(3, True, 3.0, ["above ceiling"]),
            _rec(4, True, 1.2)]
    assert pick_base(recs).round == 2
    assert [r.round for r in ranked(recs)] == [2, 4]
    # Without timing (CPU): the latest correct kernel is the base, nothing is ranked.
    cpu = [_rec(0, True), _rec(1, True), _rec(2, False), _rec(3, True), _rec(4, False)]
    assert pick_base(cpu).round == 3 and ranked(cpu) == []


def test_every_model_form_is_one_provider_of_one_map(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """--model through the SDK's MultiProvider: file: needs no key, a local server's 'Org/Model' id reaches the
    server whole (not read as a provider prefix), with this run's key and base URL."""
    import asyncio

    from agents import ModelSettings, ModelTracing
    from fake_openai_server import FakeOpenAIServer, final

    from astra_sglang.agents.config import ModelOptions
    from astra_sglang.agents.models import build_model, model_name

    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    m = build_model(ModelOptions(model=f"file:{tmp_path}", api_key_env="NO_SUCH_KEY"))
    assert isinstance(m, FileModel) and m.directory == tmp_path
    assert model_name(ModelOptions(model="Qwen/Qwen3-8B")) == "openai/Qwen/Qwen3-8B"

    monkeypatch.setenv("LOCAL_KEY", "test-key")
    with FakeOpenAIServer(lambda body: final("ok"), models=("Qwen/Qwen3-8B",)) as srv:
        model = build_model(ModelOptions(model="Qwen/Qwen3-8B", base_url=srv.url, api_key_env="LOCAL_KEY"))
        reply = asyncio.run(model.get_response(
            system_instructions="# Role: testing agent", input="hi", model_settings=ModelSettings(), tools=[],
            output_schema=None, handoffs=[], tracing=ModelTracing.DISABLED, previous_response_id=None))
        assert srv.requests[-1].body["model"] == "Qwen/Qwen3-8B"
        assert srv.requests[-1].authorization.endswith("test-key")
    assert reply.output
