"""The whole loop against a scripted OpenAI-compatible server on 127.0.0.1: the real SDK, real HTTP, real
tool calls, the real harness on SGLang's Triton merge_state under TRITON_INTERPRET=1 (tiny CPU suite).

Candidates are the developers' scripted kernels (tests/candidates/merge_state/scripted), not model output.
There is no timing on CPU, so this run picks no winner; the queue test covers choosing one.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from fake_openai_server import (
    FakeOpenAIServer,
    Script,
    delayed,
    final,
    http_error,
    tool_call,
)
from loop_support import (
    API_KEY,
    candidate,
    code_reply,
    diagnosis_reply,
    grep_tree,
    merge_state_dir,
    only_run,
    optimize_args,
    plan_reply,
    suite_reply,
)

from astra_sglang.cli.main import main

pytestmark = pytest.mark.timeout(400)


@pytest.fixture(scope="module")
def op_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return merge_state_dir(tmp_path_factory.getbasetemp())


@pytest.fixture()
def cpu_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("ASTRA_TEST_KEY", API_KEY)


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_build_fix_wrong_candidate_500_timeout_prose_and_a_dead_server(op_dir: Path, tmp_path: Path, cpu_env):
    prose = "Here is my improved kernel: it tiles the rows so each program merges eight heads."
    s = Script()
    s.add("testing", final(suite_reply()))
    # round 1: profiling uses its tools; planning survives an HTTP 500; coding's first answer does not
    # parse (compiler error fed back), its second is not JSON (fed back), its third builds and is correct.
    s.add("profiling", tool_call("run_timing", {}), tool_call("resource_report", {}), final(diagnosis_reply()))
    s.add("planning", http_error(500), final(plan_reply("tile rows")))
    s.add("coding", final(code_reply(candidate("r1.py"))), final("{ this is not json"),
          final(code_reply(candidate("r4.py"), "tiles of 8 rows")))
    # round 2: the first profiling request times out (retried); coding checks a wrong kernel with the tool,
    # sees INCORRECT, and answers it anyway: it must be logged incorrect.
    s.add("profiling", delayed(final(diagnosis_reply("stale")), 4.0), final(diagnosis_reply("round 2 view")))
    s.add("planning", final(plan_reply("tighter mask")))
    s.add("coding", tool_call("check_candidate", {"source": candidate("r2.py")}), final(code_reply(candidate("r2.py"))))
    # round 3: same base as round 2 (round 2 was wrong), so no new diagnosis; coding answers prose 3 times.
    s.add("planning", final(plan_reply("bigger tiles")))
    s.add("coding", final(code_reply(prose)), final(code_reply(prose)), final(code_reply(prose)))
    # round 4: the server keeps failing: retries run out, the round fails, the run still ends cleanly.
    s.add("planning", *[http_error(503) for _ in range(4)])

    runs = tmp_path / "runs"
    with FakeOpenAIServer(s, api_key=API_KEY) as srv:
        rc = main(optimize_args(op_dir, runs, srv.url, "--rounds", "4", "--max-fix-attempts", "2",
                                "--request-timeout-s", "2"))
        roles = srv.roles()
        coding_bodies = [r.body for r in srv.requests if r.role == "coding"]
        statuses = [r for r in srv.requests if r.path.endswith("/models")]
    assert rc == 0
    assert statuses, "a preflight request went out before the work"
    assert roles[0] == "testing"
    run = only_run(runs)
    log = _jsonl(run / "log.jsonl")
    assert [(r["round"], r["status"], r["correct"]) for r in log] == [
        (0, "ok", True), (1, "ok", True), (2, "incorrect", False), (3, "build_failed", None), (4, "failed", None)]

    # Round 1: the compiler's message and the unreadable reply both went back to the coding agent.
    fed_back = [m["content"] for m in coding_bodies[1]["messages"] if m["role"] == "user"][-1]
    assert "failed to build" in fed_back and "SyntaxError" in fed_back and "never closed" in fed_back
    fed_back = [m["content"] for m in coding_bodies[2]["messages"] if m["role"] == "user"][-1]
    assert "could not be read as the required JSON" in fed_back
    assert log[1]["fix_attempts"] == 2 and log[1]["source"] == candidate("r4.py")
    assert log[1]["suggestions"][0]["title"] == "tile rows"
    assert any(i.get("type") == "function_call" and i.get("name") == "run_timing"
               for t in log[1]["transcript"] for i in t["items"])

    # Round 2: the tool showed the agent the failure; the harness logged the candidate as incorrect.
    tool_out = [m["content"] for m in coding_bodies[4]["messages"] if m["role"] == "tool"][0]
    assert "INCORRECT" in tool_out and "unwritten" in tool_out
    assert "unwritten" in log[2]["first_failure"] and log[2]["base_round"] == 1

    # Round 3: prose is not code; it failed the form check every time, the round failed cleanly.
    assert "SyntaxError" in log[3]["first_failure"] and log[3]["fix_attempts"] == 2
    assert json.loads((run / "rounds/r003/diagnosis.json").read_text())["reused_from"] == 2
    assert roles.count("profiling") == 3 + 2  # round 1: 3 turns; round 2: timeout + retry; round 3: none

    assert "failed after 4 attempts" in log[4]["error"] and "503" in log[4]["error"]
    assert (run / "rounds/r004/error.txt").is_file()

    # The 500 and the timeout were retried, and every attempt is on record.
    calls = [json.loads(p.read_text()) for p in sorted((run / "calls").glob("*.json"))]
    errors = [c["error"] for c in calls if c["error"]]
    assert any("500" in e for e in errors) and any("Timeout" in e for e in errors)
    assert all(c["request"]["system"].startswith("# Role:") for c in calls)

    # No winner on CPU, said plainly; tokens and wall time per step; the key is nowhere on disk.
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "done" and meta["winner"]["round"] is None
    assert "no timing" in meta["winner"]["reason"]
    assert not any(p.suffix == ".py" for p in (run / "best").iterdir())
    steps = _jsonl(run / "steps.jsonl")
    assert sum(s["tokens"]["input_tokens"] for s in steps if s["round"] == 1) > 0
    assert all(s["wall_s"] >= 0 for s in steps)
    suite = json.loads((run / "rounds/r000/suite.json").read_text())
    assert len(suite["accepted"]) == 2 and "T=0" in suite["rejected"][0] and suite["used_by_harness"]

    assert grep_tree(run, API_KEY) == []
    assert "ASTRA_TEST_KEY" in (run / "run.json").read_text()  # the variable's name is kept, not its value


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_missing_key_unreachable_server_and_bad_key_fail_first(op_dir: Path, tmp_path: Path, cpu_env, capsys,
                                                               monkeypatch: pytest.MonkeyPatch):
    runs = tmp_path / "runs"
    monkeypatch.delenv("ASTRA_TEST_KEY")
    assert main(optimize_args(op_dir, runs, "http://127.0.0.1:9/v1")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ASTRA_TEST_KEY is not set" in err[0]

    monkeypatch.setenv("ASTRA_TEST_KEY", API_KEY)
    assert main(optimize_args(op_dir, runs, f"http://127.0.0.1:{_closed_port()}/v1")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot reach the model server" in err[0]

    with FakeOpenAIServer(Script(), api_key="another-key") as srv:
        assert main(optimize_args(op_dir, runs, srv.url)) == 2
        assert all(r.path.endswith("/models") for r in srv.requests)  # nothing but the preflight
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rejected the API key" in err[0]
    assert not runs.exists()  # no run folder, no work: the error came first
    assert "Traceback" not in "".join(err)


def test_a_run_where_every_model_call_fails_exits_non_zero(op_dir: Path, tmp_path: Path, cpu_env, capsys):
    gone = '{"error": {"message": "The model `o4-mini` does not exist", "code": "model_not_found"}}'
    script = Script()
    for role in ("testing", "profiling", "planning", "coding"):
        script.default(role, lambda body: http_error(404, gone))
    runs = tmp_path / "runs"
    with FakeOpenAIServer(script, api_key=API_KEY) as srv:  # lists o4-mini, so the preflight passes
        rc = main(optimize_args(op_dir, runs, srv.url, "--rounds", "2", "--json"))
    out, err = capsys.readouterr()
    assert rc == 1
    summary = json.loads(out)  # stdout is the summary alone; progress went to stderr
    run = only_run(runs)
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "failed" == summary["status"] and summary["exit_code"] == 1
    assert meta["message"].startswith("no round produced a correct candidate (2 failed)")
    assert "404" in meta["message"] and summary["message"] == meta["message"]
    assert [(r["round"], r["status"]) for r in summary["rounds"]] == [(0, "ok"), (1, "failed"), (2, "failed")]
    assert summary["run_dir"] == str(run) and summary["winner"]["round"] is None
    assert "no round produced a correct candidate" in err
