"""No harness process outlives its verdict or its parent (issue 22: 3 of 7 timeout verdicts left the worker
spinning at 100% CPU, which on a GPU host disturbs the next candidate's timing).

A stand-in candidate spins forever at import and writes its worker's pid and its judge's pid (the worker's
parent) to a file the test names. Checked on CPU: after a timeout verdict the worker is gone; when the judge is
SIGKILLed the worker dies with it; when the evaluate parent is SIGKILLed the judge and the worker both die.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from h_fixtures.ops import make_h_merge

from astra_sglang.contract.eval_config import EvalConfig
from astra_sglang.harness import evaluate
from astra_sglang.harness.shared.isolation import Child
from astra_sglang.harness.shared.sandbox import WRITABLE_ENV

REPO = Path(__file__).resolve().parent.parent
PIDFILE_ENV = "ASTRA_TEST_SPIN_PIDFILE"
SPINNER = f'''"""A stand-in candidate that never finishes importing and burns a core while it waits."""
import os

with open(os.environ["{PIDFILE_ENV}"], "w") as f:
    f.write(f"{{os.getpid()}} {{os.getppid()}}\\n")
while True:
    pass
'''


def _alive(pid: int) -> bool:
    """Running or sleeping; a zombie (dead, not yet reaped by init) runs nothing and holds no GPU memory."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _gone_within(pids: list[int], seconds: float) -> list[int]:
    """The pids still alive after ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def _pids(pidfile: Path, seconds: float = 120.0) -> tuple[int, int]:
    """(worker pid, judge pid) once the spinning candidate has written them."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        text = pidfile.read_text() if pidfile.exists() else ""
        if text.endswith("\n"):
            worker, judge = text.split()
            return int(worker), int(judge)
        time.sleep(0.1)
    raise AssertionError("the spinning candidate never started")


def _kill(pids: list[int]) -> None:
    """Clean up after a failed test: only the processes this test started."""
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="module")
def merge_op(tmp_path_factory) -> Path:
    return make_h_merge(tmp_path_factory.mktemp("ops"))


@pytest.fixture
def spinner(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """(candidate, pidfile); the evaluate parent's environment reaches the judge and the worker."""
    cand = tmp_path / "spins.py"
    cand.write_text(SPINNER)
    pidfile = tmp_path / "pids"
    monkeypatch.setenv(PIDFILE_ENV, str(pidfile))
    monkeypatch.setenv(WRITABLE_ENV, str(tmp_path))  # the worker's sandbox lets it write the pid file there
    return cand, pidfile


def _config(timeout_s: float) -> EvalConfig:
    # unscreened: the spinner imports os (the screen would refuse it before any process starts)
    return EvalConfig(shapes="test", dtypes=["bfloat16"], device="cpu", timeout_s=timeout_s, seed=7, screen=False)


def test_a_worker_hung_in_candidate_code_is_gone_when_the_timeout_verdict_arrives(merge_op, spinner):
    cand, pidfile = spinner
    r = evaluate(merge_op, cand, _config(timeout_s=8))
    worker, judge = _pids(pidfile, 1)
    try:
        assert not r.ok and r.correctness.first_failure.reason == "timeout", r.error
        assert _gone_within([worker, judge], 3.0) == []
    finally:
        _kill([worker, judge])


def test_a_hung_worker_dies_with_its_judge(merge_op, spinner):
    """The judge SIGKILLed mid-check (as the evaluate parent does at its own timeout): the worker, in a session
    of its own, must not live on."""
    cand, pidfile = spinner
    box = []
    t = threading.Thread(target=lambda: box.append(evaluate(merge_op, cand, _config(timeout_s=300))), daemon=True)
    t.start()
    worker, judge = _pids(pidfile)
    try:
        os.kill(judge, signal.SIGKILL)
        assert _gone_within([worker], 5.0) == []
        t.join(60)
        assert box and not box[0].ok and box[0].correctness.first_failure.reason == "crash", box
    finally:
        _kill([worker, judge])


def test_the_judge_and_the_worker_die_with_the_evaluate_parent(merge_op, spinner):
    cand, pidfile = spinner
    code = ("import sys; from pathlib import Path; from astra_sglang.contract.eval_config import EvalConfig; "
            "from astra_sglang.harness.parent.evaluate import evaluate; "
            "evaluate(Path(sys.argv[1]), Path(sys.argv[2]), EvalConfig(shapes='test', dtypes=['bfloat16'], "
            "device='cpu', timeout_s=300, seed=7, screen=False))")
    parent = subprocess.Popen([sys.executable, "-c", code, str(merge_op), str(cand)], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = judge = -1
    try:
        worker, judge = _pids(pidfile)
        assert _alive(worker) and _alive(judge)
        parent.kill()
        parent.wait(30)
        assert _gone_within([worker, judge], 5.0) == []
    finally:
        parent.kill()
        parent.wait(30)
        _kill([p for p in (worker, judge) if p > 0])


STANDIN = '''"""A child that reports its pid and sleeps until killed."""
import os
import sys
import time

from astra_sglang.harness.shared.isolation import die_with_parent

die_with_parent()
os.write(int(sys.argv[2]), f"{os.getpid()}\\n".encode())
while True:
    time.sleep(1)
'''


def test_close_kills_a_helper_left_in_the_group_after_the_child_itself_exited(tmp_path):
    """``Child.close`` kills the child's process group even when the child is gone: a helper it started
    (here a ``sleep``) is in that group and would otherwise live on."""
    (tmp_path / "exits_leaving_a_helper.py").write_text(
        "import os, subprocess, sys\n"
        "from multiprocessing.connection import Connection\n"
        "helper = subprocess.Popen(['sleep', '300'])\n"
        "Connection(int(sys.argv[2]), readable=False).send_bytes(str(helper.pid).encode())\n"
        "os._exit(0)\n")
    child = Child("exits_leaving_a_helper", device="cpu", name="stand-in",
                  env_extra={"PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])})
    helper = -1
    try:
        helper = int(child.recv_bytes(60).decode())
        child.proc.wait(30)
        assert _alive(helper)
        child.close()
        assert _gone_within([helper], 3.0) == []
    finally:
        child.close()
        _kill([helper] if helper > 0 else [])


def test_die_with_parent_exits_when_the_parent_is_already_gone(tmp_path):
    """The race ``die_with_parent`` closes: the parent died before the child asked for the signal."""
    (tmp_path / "standin.py").write_text(STANDIN)
    r, w = os.pipe()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]),
               ASTRA_HARNESS_PARENT_PID="1")  # not our parent: as if re-parented before the call
    proc = subprocess.Popen([sys.executable, "-m", "standin", "0", str(w)], pass_fds=(w,), env=env)
    os.close(w)
    try:
        assert proc.wait(60) == 1
        assert os.read(r, 100) == b""  # it never got past die_with_parent
    finally:
        proc.kill()
        os.close(r)
