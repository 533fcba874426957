"""Run one worker process with a wall-clock watchdog; whatever the candidate does, the caller gets a verdict.

A fresh interpreter per candidate (``python -m astra_sglang.harness.worker``), job and results over a private
pipe pair (the child's stdout/stderr go to a log whose tail explains a crash). The worker reports progress
before each step; silence longer than ``timeout_s`` (a hang) or a total beyond ``max_wall_s`` kills it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Optional


@dataclass
class WorkerOutcome:
    result: Optional[dict[str, Any]] = None
    error: Optional[dict[str, Any]] = None  # exception inside the worker, with traceback
    died: Optional[str] = None  # 'timeout' or 'crash'
    detail: str = ""
    last_progress: Optional[dict[str, Any]] = None
    log_tail: str = ""
    wall_s: float = 0.0
    progress: list[dict[str, Any]] = field(default_factory=list)


def _describe_exit(code: Optional[int]) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name} ({-code})"
    return f"exited with status {code}"


def run_worker(job: dict[str, Any], *, device: str, timeout_s: float, max_wall_s: float,
               env_extra: Optional[dict[str, str]] = None) -> WorkerOutcome:
    p2c_r, p2c_w = os.pipe()
    c2p_r, c2p_w = os.pipe()
    env = dict(os.environ)
    # the worker imports this very package, wherever the caller runs from (installed or a source checkout)
    root = str(Path(__file__).resolve().parent.parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env["ASTRA_WORKER_DEVICE"] = device
    env["PYTHONFAULTHANDLER"] = "1"
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    env.update(env_extra or {})
    log = tempfile.TemporaryFile(mode="w+b")
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "astra_sglang.harness.worker", str(p2c_r), str(c2p_w)],
                            pass_fds=(p2c_r, c2p_w), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=env, start_new_session=True)
    os.close(p2c_r)
    os.close(c2p_w)
    to_child = Connection(p2c_w, readable=False)
    from_child = Connection(c2p_r, writable=False)
    out = WorkerOutcome()
    try:
        to_child.send(job)
        to_child.close()
        last = time.monotonic()
        while True:
            now = time.monotonic()
            wait = min(timeout_s - (now - last), max_wall_s - (now - t0))
            if wait <= 0 or not from_child.poll(wait):
                if proc.poll() is not None and not from_child.poll(0):
                    out.died, out.detail = "crash", f"worker {_describe_exit(proc.returncode)}"
                    break
                if from_child.poll(0):
                    continue
                out.died = "timeout"
                quiet = time.monotonic() - last
                out.detail = (f"no progress for {quiet:.0f} s (limit {timeout_s:.0f} s)" if quiet >= timeout_s
                              else f"total time over {max_wall_s:.0f} s")
                break
            try:
                kind, payload = from_child.recv()
            except (EOFError, OSError):
                proc.wait(timeout=10)
                out.died, out.detail = "crash", f"worker {_describe_exit(proc.returncode)}"
                break
            last = time.monotonic()
            if kind == "progress":
                out.last_progress = payload
                out.progress.append(payload)
            elif kind == "result":
                out.result = payload
                break
            else:
                out.error = payload
                break
    finally:
        _kill(proc)
        from_child.close()
        out.wall_s = time.monotonic() - t0
        log.seek(0, os.SEEK_END)
        size = log.tell()
        log.seek(max(0, size - 6000))
        out.log_tail = log.read().decode(errors="replace")
        log.close()
    return out


def _kill(proc: subprocess.Popen) -> None:
    """The worker's whole session (it may have spawned helpers), by its own process-group id."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
