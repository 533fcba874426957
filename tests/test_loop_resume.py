"""A run killed mid-round (SIGKILL of the optimize process) resumes without repeating finished steps; one
stopped by SIGTERM or Ctrl-C says so in run.json first."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAIServer, Script, delayed, final
from loop_support import (
    API_KEY,
    PY,
    REPO,
    candidate,
    code_reply,
    ctrl_c_deliverable,
    diagnosis_reply,
    grep_tree,
    loop_env,
    merge_state_dir,
    optimize_args,
    plan_reply,
    run_cli,
    suite_reply,
)

pytestmark = pytest.mark.timeout(400)


@pytest.fixture(scope="module")
def op_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return merge_state_dir(tmp_path_factory.getbasetemp())


def _wait_for(cond, timeout: float, what: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        if proc.poll() is not None:
            raise AssertionError(f"optimize exited early ({proc.returncode}) while waiting for {what}:\n"
                                 f"{proc.stdout.read() if proc.stdout else ''}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _start(op_dir: Path, runs: Path, url: str, run_id: str, rounds: int) -> subprocess.Popen:
    args = optimize_args(op_dir, runs, url, "--rounds", str(rounds), "--run-id", run_id, "--request-timeout-s", "300")
    return subprocess.Popen([PY, "-m", "astra_sglang", *args], cwd=REPO, env=loop_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=ctrl_c_deliverable)


def _resume_with_plan_and_code(runs: Path, run_id: str, rnd: int) -> list[str]:
    """Resume with a server that has only round ``rnd``'s plan and code: any other request would fail."""
    second = Script()
    second.add("planning", final(plan_reply(f"round {rnd} plan")))
    second.add("coding", final(code_reply(candidate("r5.py"), f"round {rnd} code")))
    with FakeOpenAIServer(second, api_key=API_KEY) as srv2:
        done = run_cli(["optimize", "--resume", run_id, "--runs-dir", str(runs), "--base-url", srv2.url,
                        "--no-live"], env=loop_env())
        roles = srv2.roles()
    assert done.returncode == 0, done.stdout + done.stderr
    return roles


def test_killed_mid_round_resumes_without_repeating_steps(op_dir: Path, tmp_path: Path):
    runs = tmp_path / "runs"
    run = runs / "merge_state" / "killme"
    first = Script()
    first.add("testing", final(suite_reply()))
    first.add("profiling", final(diagnosis_reply("round 1")))
    first.add("planning", final(plan_reply("round 1 plan")))
    first.add("coding", final(code_reply(candidate("r4.py"), "round 1 code")))
    first.add("profiling", final(diagnosis_reply("round 2")))
    first.add("planning", delayed(final(plan_reply("never delivered")), 120))  # killed while waiting for this
    with FakeOpenAIServer(first, api_key=API_KEY) as srv:
        proc = _start(op_dir, runs, srv.url, "killme", rounds=2)
        try:
            _wait_for(lambda: srv.roles().count("planning") == 2, 240, "round 2's planning request", proc)
            assert (run / "rounds/r001/record.json").is_file()
            assert (run / "rounds/r002/diagnosis.json").is_file()
        finally:
            proc.kill()  # SIGKILL: no cleanup, no status update
            proc.wait()
        before_roles = srv.roles()
    assert before_roles == ["testing", "profiling", "planning", "coding", "profiling", "planning"]
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "running" and (run / "lock").exists()
    r1_before = (run / "rounds/r001/record.json").read_text()

    after_roles = _resume_with_plan_and_code(runs, "killme", 2)
    # Only the step in flight was redone: no testing, no round 1, no round 2 diagnosis.
    assert after_roles == ["planning", "coding"]
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert [r["round"] for r in log] == [0, 1, 2]
    assert [r["status"] for r in log] == ["ok", "ok", "ok"]
    assert log[2]["suggestions"][0]["title"] == "round 2 plan" and log[2]["changes"] == "round 2 code"
    assert log[2]["diagnosis"]["summary"] == "round 2"  # from the checkpoint written before the kill
    assert (run / "rounds/r001/record.json").read_text() == r1_before
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "done" and not (run / "lock").exists()
    assert grep_tree(run, API_KEY) == []


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_sigterm_and_ctrl_c_mark_the_run_interrupted_and_keep_finished_steps(op_dir: Path, tmp_path: Path, sig, code):
    runs = tmp_path / "runs"
    run = runs / "merge_state" / "stopme"
    first = Script()
    first.add("testing", final(suite_reply()))
    first.add("profiling", final(diagnosis_reply("round 1")))
    first.add("planning", delayed(final(plan_reply("never delivered")), 120))  # stopped while waiting for this
    with FakeOpenAIServer(first, api_key=API_KEY) as srv:
        proc = _start(op_dir, runs, srv.url, "stopme", rounds=1)
        try:
            _wait_for(lambda: srv.roles().count("planning") == 1, 240, "round 1's planning request", proc)
            proc.send_signal(sig)
            out, _ = proc.communicate(timeout=60)
        finally:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, out
    assert "interrupted; everything written so far is kept" in out and "Traceback" not in out
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "interrupted" and not (run / "lock").exists()
    assert (run / "rounds/r000/record.json").is_file() and (run / "rounds/r001/diagnosis.json").is_file()

    after_roles = _resume_with_plan_and_code(runs, "stopme", 1)
    assert after_roles == ["planning", "coding"]  # the suite and round 1's diagnosis were not asked again
    assert json.loads((run / "run.json").read_text())["status"] == "done"
