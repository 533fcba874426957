"""K candidates a round (``optimize --candidates K``) against the scripted fake model server, on CPU.

Every candidate here is a SCRIPTED kernel from tests/candidates/merge_state/scripted (written by the
developers, not by a model); the runs are labelled so. This host has no GPU: the queue test plays the GPU host
with the real harness verdicts plus a timing that was NOT measured, marked ``INJECTED BY TEST`` (as in
test_loop_queue.py), so what it shows is the choice among K candidates, not a speed.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_openai_server import FakeOpenAIServer, Reply, Script, final, http_error, tool_call
from loop_support import (
    API_KEY,
    PY,
    REPO,
    answer_queue,
    candidate,
    code_reply,
    diagnosis_reply,
    loop_env,
    merge_state_dir,
    only_run,
    optimize_args,
    run_cli,
    suite_reply,
)

from astra_sglang.loop.evaluator import QueueEvaluator
from astra_sglang.loop.records import EvalSpec

pytestmark = pytest.mark.timeout(600)
LABEL = "SCRIPTED candidates (tests/candidates/merge_state/scripted), not found by a model"


@pytest.fixture(scope="module")
def op_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return merge_state_dir(tmp_path_factory.getbasetemp())


def plan(title: str) -> dict[str, Any]:
    return {"suggestions": [{"title": title, "change": f"apply {title}", "expected_effect": "faster",
                             "risk": "tails"}], "lessons_from_history": "-", "avoid": []}


def plan_set(*titles: str) -> dict[str, Any]:
    return {"plans": [plan(t) for t in titles]}


def _first_user(body: dict) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def coder(sources: dict[str, str], check_first: tuple[str, ...] = (), delays: dict[str, float] | None = None):
    """Coding replies chosen by the plan in the request (the K agents ask in any order); the plans named in
    ``check_first`` call check_candidate before answering."""
    def answer(body: dict) -> Reply:
        text = _first_user(body)
        title = next((t for t in sources if f'"{t}"' in text), None)
        if title is None:
            return http_error(500, json.dumps({"error": {"message": "fake server: no scripted plan in request"}}))
        checked = any(m["role"] == "tool" for m in body["messages"])
        if title in check_first and not checked:
            return tool_call("check_candidate", {"source": sources[title]})
        return final(code_reply(sources[title], f"{title} (scripted)"), delay_s=(delays or {}).get(title, 0.0))
    return answer


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


SPEEDUPS = {"r000-original": 1.0, "r001-c1": 5.0, "r001-c2": 1.5, "r001-c3": 1.8, "r001-c3-heldout": 1.7,
            "r002-c0": 0.7}


def _gpu_host(queue: Path, op_dir: Path, stop: threading.Event, seen: list[str]) -> None:
    while not stop.is_set():
        seen += answer_queue(queue, op_dir, SPEEDUPS)
        time.sleep(0.2)


def test_four_candidates_a_round_broken_and_wrong_never_win_patience_stops(op_dir: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # this process plays the GPU host's harness
    runs, queue = tmp_path / "runs", tmp_path / "queue"
    s = Script()
    s.add("testing", final(suite_reply()))
    s.default("profiling", lambda body: final(diagnosis_reply()))
    # Round 1: the first answer repeats a direction: refused, asked again; the second gives four.
    s.add("planning", final(plan_set("dir-A", "dir-B", "dir-A", "dir-C")),
          final(plan_set("dir-A", "dir-B", "dir-C", "dir-D")), final(plan_set("dir-E", "dir-F", "dir-G", "dir-H")))
    sources = {"dir-A": candidate("r1.py"),  # does not parse
               "dir-B": candidate("r2.py"),  # wrong: the last element of each head is never written
               "dir-C": candidate("r4.py"), "dir-D": candidate("r5.py"),  # correct
               # round 2: one correct but slower, three that do not parse (cheap on 2 CPU cores): no gain
               "dir-E": candidate("r3.py"), "dir-F": candidate("r1.py"), "dir-G": candidate("r1.py"),
               "dir-H": candidate("r1.py")}
    s.default("coding", coder(sources, check_first=("dir-B",),
                              delays={t: 1.0 for t in ("dir-A", "dir-B", "dir-C", "dir-D")}))
    env = loop_env(interpret=False)  # the loop's host: no GPU, no TRITON_INTERPRET
    with FakeOpenAIServer(s, api_key=API_KEY) as srv:
        args = optimize_args(op_dir, runs, srv.url, "--rounds", "3", "--candidates", "4", "--patience", "1",
                             "--eval-queue", str(queue), "--run-id", "k4", "--max-fix-attempts", "1",
                             "--label", LABEL)
        first = run_cli(args, env)
        assert first.returncode == 3, first.stdout + first.stderr  # waiting for the original
        assert answer_queue(queue, op_dir, SPEEDUPS) == ["r000-original"]
        resume = ["optimize", "--resume", "k4", "--runs-dir", str(runs), "--no-live"]
        second = run_cli(resume, env)
        # Round 1's three buildable candidates went to the queue together: one stop, not three.
        assert second.returncode == 3, second.stdout + second.stderr
        assert "waiting for 3 evaluation(s)" in second.stdout
        assert sorted(answer_queue(queue, op_dir, SPEEDUPS)) == ["r001-c1", "r001-c2", "r001-c3"]
        stop, seen = threading.Event(), list[str]()
        host = threading.Thread(target=_gpu_host, args=(queue, op_dir, stop, seen), daemon=True)
        host.start()
        try:
            third = run_cli(resume + ["--eval-wait-s", "300"], env)
        finally:
            stop.set()
            host.join(timeout=60)
        coding = [r for r in srv.requests if r.role == "coding"]
        planning = [r for r in srv.requests if r.role == "planning"]
    assert third.returncode == 0, third.stdout + third.stderr
    assert sorted(seen) == ["r001-c3-heldout", "r002-c0"]

    run = only_run(runs)
    log = _jsonl(run / "log.jsonl")
    assert [r["round"] for r in log] == [0, 1, 2]  # round 3 never ran: round 2 gained nothing
    meta = json.loads((run / "run.json").read_text())
    assert "without gain" in meta["stop_reason"] and "--patience 1" in meta["stop_reason"]
    r1 = log[1]
    assert [(c["candidate"], c["status"]) for c in r1["candidates"]] == [
        (0, "build_failed"), (1, "incorrect"), (2, "ok"), (3, "ok")]
    assert "SyntaxError" in r1["candidates"][0]["first_failure"]
    assert "unwritten" in r1["candidates"][1]["first_failure"]
    assert r1["candidate"] == 3 and r1["geomean_speedup"] == 1.8  # the round's line is its best candidate
    assert "same direction as plan 1" in r1["plan_note"]
    assert [c["source"] for c in r1["candidates"]] == [sources[t] for t in ("dir-A", "dir-B", "dir-C", "dir-D")]
    assert log[2]["base_round"] == 1 and log[2]["base_candidate"] == 3  # round 2 starts from the best so far

    # The wrong one had the biggest (injected) speedup in both rounds; the winner is the faster correct one.
    winner = meta["winner"]
    assert (winner["round"], winner["candidate"], winner["heldout_ok"]) == (1, 3, True)
    assert (run / "best" / "merge_state.py").read_text() == candidate("r5.py")
    assert json.loads((run / "best" / "summary.json").read_text())["candidates_per_round"] == 4
    assert "round 1 candidate 3" in third.stdout

    # The four coding agents asked at once: their first requests came within one reply's delay (1 s).
    firsts: dict[str, float] = {}
    for r in coding:
        firsts.setdefault(next(t for t in sources if f'"{t}"' in _first_user(r.body)), r.t)
    spread = max(firsts[t] for t in ("dir-A", "dir-B", "dir-C", "dir-D")) - min(
        firsts[t] for t in ("dir-A", "dir-B", "dir-C", "dir-D"))
    assert spread < 0.9, firsts
    # check_candidate on this CPU host ran the Triton interpreter and told the agent the candidate is wrong.
    tool_out = next(m["content"] for r in coding for m in r.body["messages"] if m["role"] == "tool")
    # (the suite is the harness's 3 test shapes plus the testing agent's 2 accepted cases)
    assert "ran under the Triton interpreter on 5 test shape(s): WRONG" in tool_out and "unwritten" in tool_out

    # Round 2's planner saw every round-1 candidate, the correct ones fastest first, then the failures.
    assert len(planning) == 3
    text = _first_user(planning[2].body)
    history = json.loads(text.split("## history\n```json\n")[1].split("\n```")[0])
    assert [(h["round"], h["candidate"], h["status"]) for h in history] == [
        (1, 3, "ok"), (1, 2, "ok"), (1, 0, "build_failed"), (1, 1, "incorrect")]
    assert "unwritten" in history[3]["failure"] and "## directions\n4" in text

    # Per step: wall time, tokens, the candidate and its sha256; evaluations carry the speedup.
    steps = _jsonl(run / "steps.jsonl")
    code_steps = [st for st in steps if st["step"] == "coding" and st["round"] == 1 and st["status"] == "ok"]
    assert sorted({st["candidate"] for st in code_steps}) == [0, 1, 2, 3]
    assert all(st["tokens"]["input_tokens"] > 0 and st["candidate_sha256"] for st in code_steps)
    evals = {st["candidate"]: st["speedup"] for st in steps
             if st["round"] == 1 and st["step"] == f"evaluate:c{st.get('candidate')}/result"}
    assert evals == {1: 5.0, 2: 1.5, 3: 1.8}
    assert all((run / "rounds/r001" / f"c{j}" / "code.json").is_file() for j in range(4))


def test_resume_killed_in_a_four_candidate_round_repeats_no_finished_model_call(op_dir: Path, tmp_path: Path):
    """Killed with three candidates finished and the fourth between its turns: its check_candidate turn was
    answered, its final answer was not. The resume asks the model for that final answer and nothing else."""
    runs = tmp_path / "runs"
    run = runs / "merge_state" / "kill-k"
    sources = {"dir-A": candidate("r4.py"), "dir-B": candidate("r5.py"), "dir-C": candidate("r3.py"),
               "dir-D": candidate("r4.py")}
    first = Script()
    first.add("testing", final(suite_reply()))
    first.add("profiling", final(diagnosis_reply()))
    first.add("planning", final(plan_set("dir-A", "dir-B", "dir-C", "dir-D")))
    # dir-D checks first (answered), then its final answer never comes: killed while waiting for it
    first.default("coding", coder(sources, check_first=("dir-D",), delays={"dir-D": 120.0}))
    args = optimize_args(op_dir, runs, "URL", "--rounds", "1", "--candidates", "4", "--run-id", "kill-k",
                         "--request-timeout-s", "300", "--label", LABEL)
    with FakeOpenAIServer(first, api_key=API_KEY) as srv:
        args[args.index("URL")] = srv.url
        proc = subprocess.Popen([PY, "-m", "astra_sglang", *args], cwd=REPO, env=loop_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 300
            done = lambda: all((run / f"rounds/r001/c{j}/code.json").is_file() for j in range(3))  # noqa: E731
            while not (done() and srv.roles().count("coding") == 5):
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "timed out waiting for three finished candidates"
                time.sleep(0.2)
        finally:
            proc.kill()  # SIGKILL: no cleanup
            proc.wait()
        before = srv.roles()
    assert sorted(before) == sorted(["testing", "profiling", "planning"] + ["coding"] * 5)
    assert not (run / "rounds/r001/c3/code.json").exists()
    assert len(list((run / "calls").glob("*-coding.c3.json"))) == 1  # the answered tool-call turn
    kept = {j: (run / f"rounds/r001/c{j}/code.json").read_bytes() for j in range(3)}

    second = Script()
    # any request but dir-D's final answer gets an HTTP 500 or a second tool call the test would see
    second.default("coding", coder({"dir-D": sources["dir-D"]}, check_first=("dir-D",)))
    with FakeOpenAIServer(second, api_key=API_KEY) as srv2:
        done_run = run_cli(["optimize", "--resume", "kill-k", "--runs-dir", str(runs), "--base-url", srv2.url,
                            "--no-live"], env=loop_env())
        after = srv2.roles()
        bodies = [r.body for r in srv2.requests if r.role == "coding"]
    assert done_run.returncode == 0, done_run.stdout + done_run.stderr
    assert after == ["coding"]  # only the call that never finished
    assert '"dir-D"' in _first_user(bodies[0]) and any(m["role"] == "tool" for m in bodies[0]["messages"])
    assert {j: (run / f"rounds/r001/c{j}/code.json").read_bytes() for j in range(3)} == kept
    log = _jsonl(run / "log.jsonl")
    assert [(c["candidate"], c["status"]) for c in log[1]["candidates"]] == [(j, "ok") for j in range(4)]
    # one record per answered call: the one in flight at the kill was never answered, so never recorded
    calls = sorted(p.name.split("-coding-")[1] for p in (run / "calls").glob("*-coding-*"))
    assert calls == ["coding.c0.json", "coding.c1.json", "coding.c2.json", "coding.c3.json", "coding.c3.json"]


def test_check_on_a_cpu_host_runs_the_triton_interpreter_and_says_so(op_dir: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # a plain CPU host, as in an --eval-queue run
    q = QueueEvaluator(op_dir, tmp_path / "queue", "run1")
    spec = EvalSpec(shapes="paper", device="auto")  # what the run times on the GPU host
    wrong = tmp_path / "wrong.py"
    wrong.write_text(candidate("r2.py"))
    text = q.check(wrong, spec).text()
    assert "ran under the Triton interpreter on 3 test shape(s): WRONG" in text
    assert "INCORRECT" in text and "unwritten" in text and "form checked only" not in text
    good = tmp_path / "good.py"
    good.write_text(candidate("r5.py"))
    report = q.check(good, spec)
    assert report.correct is True and "ran under the Triton interpreter on 3 test shape(s): correct" in report.text()
    assert not list((tmp_path / "queue").glob("*/request.json"))  # a check is not an evaluation


@pytest.mark.nvcc
def test_check_of_a_cuda_candidate_on_a_cpu_host_is_an_nvcc_build_with_the_ptxas_report(
        tmp_path: Path, restored_op: Callable[[str], Path]):
    op = restored_op("fused_add_rmsnorm")
    q = QueueEvaluator(op, tmp_path / "queue", "run1")
    ok = q.check(REPO / "tests/candidates/fused_add_rmsnorm/hand_written.cuh", EvalSpec())
    assert ok.built and ok.how == "compile-only"
    assert "built with nvcc for sm_90a" in ok.text() and " registers, " in ok.text() and "bytes spilled" in ok.text()
    assert "not run: no GPU here" in ok.text()
    bad = q.check(REPO / "tests/candidates/fused_add_rmsnorm/broken/compile_error.cuh", EvalSpec())
    assert not bad.built and "build FAILED" in bad.text() and "error" in bad.log


def test_single_agent_with_two_candidates_runs_two_single_agents(op_dir: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch):
    from loop_support import single_reply

    from astra_sglang.cli.main import main

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("ASTRA_TEST_KEY", API_KEY)
    by_index = {"0": candidate("r4.py"), "1": candidate("r2.py")}
    s = Script()
    s.add("single", final(suite_reply(extra_invalid=False)))  # the suite job comes first, alone
    s.default("single", lambda body: final(single_reply(by_index[_first_user(body).split("## candidate\n")[1][0]])))
    runs = tmp_path / "runs"
    with FakeOpenAIServer(s, api_key=API_KEY) as srv:
        rc = main(optimize_args(op_dir, runs, srv.url, "--single-agent", "--candidates", "2", "--rounds", "1",
                                "--label", LABEL))
        bodies = [r.body for r in srv.requests if r.role == "single"][1:]
    assert rc == 0
    assert len(bodies) == 2 and all("several candidates at once" in b["messages"][0]["content"] for b in bodies)
    assert sorted(_first_user(b).split("## candidates in round\n")[1][0] for b in bodies) == ["2", "2"]
    run = only_run(runs)
    meta = json.loads((run / "run.json").read_text())
    assert meta["mode"] == "single-agent" and meta["options"]["candidates"] == 2
    (r1,) = [r for r in _jsonl(run / "log.jsonl") if r["round"] == 1]
    assert [(c["candidate"], c["status"]) for c in r1["candidates"]] == [(0, "ok"), (1, "incorrect")]
    assert r1["candidate"] == 0 and r1["diagnosis_text"] == "memory-bound"


def test_the_candidate_check_path_parses_python_through_one_lock():
    """K coding agents check candidates at once, from the loop and from tool threads; CPython 3.11's AST converter
    is not thread-safe ("SystemError: AST constructor recursion depth mismatch" lost a candidate's round in CI).
    Every parse on the check path goes through astra_sglang.pyast's lock."""
    import re

    root = Path(__file__).resolve().parents[1] / "astra_sglang"
    check_path = [root / "harness" / n for n in ("parent/screen.py", "parent/tune_space.py", "parent/launch_params.py",
                                                 "shared/suite.py", "parent/evaluate.py")] + [root / "loop" / "static_check.py"]
    direct = [f"{p.relative_to(root)}:{i}" for p in check_path
              for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"\bast\.parse\(", line)]
    assert direct == []
