"""Child processes with watchdogs: whatever a child does, its parent gets an answer or a named death.

A fresh interpreter per child (``python -m <module> RFD WFD [FD...]``) in its own session, messages over a
private pipe pair (typed JSON, ``protocol.py``), stdout/stderr to a log whose tail explains a crash. Used
twice: the evaluate parent runs the trusted checker (``run_checker``), the checker runs the candidate worker
(``Child`` directly, one request at a time).

No child outlives its parent: each child asks the kernel to kill it when its parent dies (``die_with_parent``,
first thing in its ``main``), and a parent done with a child kills the child's whole process group
(``Child.close``), helpers included. A hung worker left spinning after its verdict would disturb the next
candidate's timing on the GPU host.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TypeVar

from astra_sglang.contract.base import Model
from astra_sglang.harness.shared.protocol import (
    CheckerError,
    CheckerMessage,
    CheckJob,
    CheckResult,
    Progress,
    ProtocolError,
    send,
)
from astra_sglang.harness.shared.sandbox import SECRET_ENV

M = TypeVar("M", bound=Model)

PARENT_ENV = "ASTRA_HARNESS_PARENT_PID"  # set by ``Child``: the pid ``die_with_parent`` expects as its parent
TRACE_ENV = "ASTRA_SGLANG_TRACE"  # "1": print every progress step of a checker, with its time, to stderr
_PR_SET_PDEATHSIG = 1
STOP_WAIT_S = 5.0  # how long ``Child.stopped`` waits for every task of the group to reach the stopped state


class ChildDied(Exception):
    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind = kind  # 'timeout' or 'crash'
        self.detail = detail


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name} ({-code})"
    return f"exited with status {code}"


def crash_lines(log: str, candidate: str | None) -> list[str]:
    """The useful part of a dead child's output: the fatal error line and the candidate's own frames."""
    lines = [ln.strip() for ln in log.strip().splitlines() if ln.strip()]
    keep = [ln for ln in lines if ln.startswith(("Fatal Python error", "Traceback", "RuntimeError", "CUDA error"))
            or "Error" in ln.split(":")[0] or (candidate and candidate in ln)]
    return (keep or lines)[-8:]


def prctl(option: int, arg: int) -> bool:
    """Linux ``prctl(option, arg)``; False where there is none (not Linux) or the kernel refused."""
    try:
        import ctypes

        return int(ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when the process that started it dies (``PR_SET_PDEATHSIG``).

    Called first thing in a child's ``main``: a worker hung in candidate code whose judge is gone (killed at
    the evaluate parent's own timeout, or by a crash) would otherwise spin on and disturb the next candidate's
    timing. The parent may already have died before this call (the child's imports take seconds): then the
    parent pid ``Child`` put in the environment is no longer ours (we were re-parented to init or a
    subreaper) and we exit at once. The signal is not inherited by what this process starts; those die with
    its process group (``Child.close``). The kernel ties it to the parent *thread*: ``Child`` is used only by
    the thread that made it."""
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    parent = os.environ.get(PARENT_ENV)
    if parent and parent.isdigit() and os.getppid() != int(parent):
        os._exit(1)


def group_tasks(pgid: int) -> list[Path]:
    """The ``/proc`` stat file of every thread of every process in process group ``pgid``."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:
                out += list((d / "task").glob("*/stat"))
        except (OSError, IndexError, ValueError):  # gone meanwhile
            continue
    return out


def all_stopped(tasks: list[Path]) -> bool:
    """Every task stopped ('T', or 't' held by a tracer), dead or gone: none of them can run."""
    for t in tasks:
        try:
            state = t.read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("T", "t", "Z", "X"):
            return False
    return True


class Child:
    def __init__(self, module: str, *, device: str, env_extra: dict[str, str] | None = None,
                 pass_fds: tuple[int, ...] = (), name: str = "worker"):
        self.name = name
        self.closed = False
        self.env_extra = dict(env_extra or {})  # what it was started with beyond ours (the judge checks its sandbox)
        p2c_r, p2c_w = os.pipe()
        c2p_r, c2p_w = os.pipe()
        env = {k: v for k, v in os.environ.items() if k != SECRET_ENV}  # a judge or worker never needs it
        # the child imports this very package, wherever the caller runs from (installed or a source checkout)
        root = str(Path(__file__).resolve().parent.parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        env["PYTHONFAULTHANDLER"] = "1"
        env[PARENT_ENV] = str(os.getpid())
        if device == "cpu":
            env["TRITON_INTERPRET"] = "1"
        env.update(env_extra or {})
        self.log = tempfile.TemporaryFile(mode="w+b")
        self.t0 = time.monotonic()
        args = [str(p2c_r), str(c2p_w), *(str(fd) for fd in pass_fds)]
        self.proc = subprocess.Popen([sys.executable, "-m", module, *args], pass_fds=(p2c_r, c2p_w, *pass_fds),
                                     stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                     start_new_session=True)
        os.close(p2c_r)
        os.close(c2p_w)
        self.to_child = Connection(p2c_w, readable=False)
        self.from_child = Connection(c2p_r, writable=False)

    def send(self, msg: Model) -> None:
        try:
            send(self.to_child, msg)
        except OSError:
            self.proc.wait(timeout=10)
            raise ChildDied("crash", f"{self.name} {describe_exit(self.proc.returncode)}") from None

    def recv_bytes(self, timeout_s: float, deadline: float | None = None, maxlength: int = 64 << 20) -> bytes:
        """The next message, or ChildDied: silence beyond ``timeout_s`` (or past ``deadline``) is a hang."""
        start = time.monotonic()
        while True:
            now = time.monotonic()
            wait = timeout_s - (now - start)
            if deadline is not None:
                wait = min(wait, deadline - now)
            if wait <= 0 or not self.from_child.poll(wait):
                if self.from_child.poll(0):
                    continue
                if self.proc.poll() is not None:
                    raise ChildDied("crash", f"{self.name} {describe_exit(self.proc.returncode)}")
                quiet = time.monotonic() - start
                raise ChildDied("timeout", f"no progress for {quiet:.0f} s (limit {timeout_s:.0f} s)"
                                if quiet >= timeout_s or deadline is None else
                                f"total time over {deadline - self.t0:.0f} s")
            try:
                return self.from_child.recv_bytes(maxlength)
            except (EOFError, OSError):
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
                raise ChildDied("crash", f"{self.name} {describe_exit(self.proc.returncode)}") from None

    def recv(self, model: type[M], timeout_s: float, deadline: float | None = None) -> M:
        data = self.recv_bytes(timeout_s, deadline)
        try:
            return model.model_validate_json(data)
        except Exception as e:  # noqa: BLE001 - pydantic.ValidationError: the peer broke the protocol
            raise ProtocolError(f"not a valid {model.__name__}: {str(e)[:500]}") from None

    def log_tail(self, n: int = 6000) -> str:
        self.log.seek(0, os.SEEK_END)
        size = self.log.tell()
        self.log.seek(max(0, size - n))
        return self.log.read().decode(errors="replace")

    @contextmanager
    def stopped(self, wait_s: float = STOP_WAIT_S) -> Iterator[bool]:
        """The child's whole process group stopped (SIGSTOP) for the body, continued (SIGCONT) after, also when
        the body raises. Yields whether every thread of the group was seen stopped before the body began (False
        only where one stayed running ``wait_s``, e.g. in an uninterruptible system call; the body still runs).

        The stop is asynchronous: the group is polled through ``/proc`` until each task is in the stopped
        state, so nothing of the child runs once the body starts (its SIGSTOP is re-sent each poll: a task
        forked meanwhile is stopped too). The polls read the states of the tasks one scan of all ``/proc``
        found, not a new scan every 0.2 ms; once those are all stopped (a stopped task starts nothing) one more
        scan confirms that no task started meanwhile is left running. SIGSTOP cannot be caught, blocked or
        ignored; a SIGCONT handler the candidate installs runs only after the body. A stopped child is asked
        nothing, so no request can time out on it; SIGKILL (``close``, ``PR_SET_PDEATHSIG``) still kills it stopped."""
        pgid = self.proc.pid
        try:
            ok = False
            end = time.monotonic() + wait_s
            tasks: list[Path] | None = None
            while True:
                try:
                    os.killpg(pgid, signal.SIGSTOP)
                except ProcessLookupError:  # the whole group is gone: nothing of it can run
                    ok = True
                    break
                if tasks is None:
                    tasks = group_tasks(pgid)
                if all_stopped(tasks):
                    fresh = group_tasks(pgid)  # a task started before the others stopped is in this scan
                    if all_stopped(fresh):
                        ok = True
                        break
                    tasks = fresh
                if time.monotonic() > end:
                    break
                time.sleep(0.0002)
            yield ok
        finally:
            try:
                os.killpg(pgid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        """Kill the child's whole process group, by its own group id, and reap it; a second call does nothing.

        The group is killed even when the child itself has already exited: a helper it spawned (a build, a
        candidate's own process) may still be running in it and would otherwise outlive the verdict."""
        if self.closed:
            return
        self.closed = True
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # the whole group is gone already
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        for c in (self.to_child, self.from_child):
            try:
                c.close()
            except OSError:
                pass

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        self.log.close()


@dataclass
class WorkerOutcome:
    result: CheckResult | None = None
    error: CheckerError | None = None  # exception inside the checker, with traceback
    died: str | None = None  # 'timeout' or 'crash'
    detail: str = ""
    last_progress: Progress | None = None
    log_tail: str = ""
    wall_s: float = 0.0
    progress: list[Progress] = field(default_factory=list)


_CEILINGS: dict[str, float] = {}  # device kind -> the copy ceiling a checker of this process measured


def known_ceiling(device: str, given: float | None = None) -> float | None:
    """The copy ceiling to hand a checker: the user's, else the one an earlier checker of this process measured
    on this device kind (each measurement costs a checker about a second; evaluate and sweep share them)."""
    return given or _CEILINGS.get(device)


def remember_ceiling(device: str, gbps: float | None) -> None:
    if gbps:
        _CEILINGS[device] = gbps


def trace_line(p: Progress) -> str:
    """A step as ASTRA_SGLANG_TRACE prints it: which case or shape, so a slow pass names its slow cases (the
    2026-12-04 trace said only "check", 120 times). A held-out case stays a number: its shape is the judge's."""
    if p.heldout:
        return f"{p.step} held-out case #{p.index}"
    if p.case is not None:
        c = p.case
        form = f" call={','.join(c.call)}" if c.call else ""
        return f"{p.step} #{p.index if p.index is not None else '-'} {c.dims} {c.dtype} {c.distribution}{form}"
    return f"{p.step} {p.dims or ''}{' ' + p.dtype if p.dtype else ''}".rstrip()


def run_checker(job: CheckJob, *, timeout_s: float, max_wall_s: float,
                env_extra: dict[str, str] | None = None) -> WorkerOutcome:
    """Run the trusted checker on one job; its progress resets the hang watchdog."""
    out = WorkerOutcome()
    trace = os.environ.get(TRACE_ENV) == "1"  # where a GPU pass spends its minutes (which step, which shape)
    with Child("astra_sglang.harness.judge.process", device=job.device, env_extra=env_extra, name="checker") as child:
        deadline = child.t0 + max_wall_s
        try:
            child.send(job)
            child.to_child.close()
            while True:
                msg = child.recv(CheckerMessage, timeout_s, deadline).msg
                if isinstance(msg, Progress):
                    out.last_progress = msg
                    out.progress.append(msg)
                    if trace:
                        print(f"[{time.monotonic() - child.t0:7.1f} s] {trace_line(msg)}", file=sys.stderr,
                              flush=True)
                elif isinstance(msg, CheckResult):
                    out.result = msg
                    break
                else:
                    out.error = msg
                    break
        except ChildDied as d:
            out.died, out.detail = d.kind, d.detail
        except ProtocolError as e:
            out.died, out.detail = "crash", f"checker sent an unreadable message: {e}"
        finally:
            child.close()
            out.wall_s = time.monotonic() - child.t0
            out.log_tail = child.log_tail()
    return out


class GpuWatch:
    """SM activity of one process (the worker) on one GPU, from NVML's per-process utilization samples.

    On CUDA, SIGSTOP stops the worker's threads but not the GPU work it already queued; that work would run
    beside the original the judge times. NVML records, per sample period, one sample for each process that
    used the GPU in it (a CPU timestamp in us since the epoch, the SM %). ``wait_quiet`` waits (bounded)
    until the worker has had no active sample for a sample period and a margin; after that any active
    sample of the stopped worker is queued work running while the judge times (``active_since``). ``open``
    gives no watch, and says why, where NVML is not importable, has no such device, or does not list the worker
    among the GPU's compute processes: a watch that cannot see the worker looks quiet whatever it queued. On the
    H100 device (2026-12-07) the quiet-worker GPU test's flood went unseen by the watch (the wall-clock check
    caught it), and a probe found no compute process listed and no per-process samples beside a matmul child.
    """

    def __init__(self, nvml: Any, handle: Any, pid: int, period_us: int):
        self.nvml, self.handle, self.pid, self.period_us = nvml, handle, pid, period_us

    @classmethod
    def open(cls, pid: int, gpu_uuid: str, nvml: Any = None) -> tuple[GpuWatch | None, str]:
        """(the watch, "") or (None, why the worker's GPU queue is not watched). ``nvml``: pynvml (tests pass
        a stand-in). Called once the worker has run the candidate, so it holds a CUDA context."""
        try:
            if nvml is None:
                import pynvml as nvml  # type: ignore[import-not-found,import-untyped,unused-ignore,no-redef]

            nvml.nvmlInit()
            uuid = gpu_uuid if gpu_uuid.startswith(("GPU-", "MIG-")) else f"GPU-{gpu_uuid}"
            handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
        except Exception as e:  # noqa: BLE001 - no NVML (ImportError, no driver, no such device): not watched
            return None, f"NVML not available ({type(e).__name__})"
        try:
            listed = {int(p.pid) for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)}
        except Exception as e:  # noqa: BLE001 - the process list is not supported here
            return None, f"NVML does not list this GPU's compute processes ({type(e).__name__})"
        if pid not in listed:  # a driver that attributes nothing (a VM), or pids of another namespace
            return None, (f"NVML does not list the worker (pid {pid}) among this GPU's compute processes "
                          f"({len(listed)} listed): its samples could never show the worker's work")
        try:
            period = 167_000  # NVML's documented 1/6 s where the device's own samples do not say
            try:
                _, samples = nvml.nvmlDeviceGetSamples(handle, nvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
                stamps = sorted(int(s.timeStamp) for s in samples)
                gaps = sorted(b - a for a, b in zip(stamps, stamps[1:]) if b > a)
                period = gaps[len(gaps) // 2] if gaps else period
            except Exception:  # noqa: BLE001 - not supported on this device: keep the documented period
                pass
            return cls(nvml, handle, pid, min(max(period, 1_000), 1_000_000)), ""
        except Exception as e:  # noqa: BLE001 - NVML stopped answering: not watched
            return None, f"NVML not available ({type(e).__name__})"

    @staticmethod
    def now_us() -> int:
        return time.time_ns() // 1000  # NVML's sample timestamps are CPU wall-clock microseconds

    def _latest_active(self, t_us: int) -> tuple[int, int]:
        """(highest SM %, newest timestamp) over the worker's active samples newer than ``t_us``; (0, 0): none."""
        try:
            samples = self.nvml.nvmlDeviceGetProcessUtilization(self.handle, t_us)
        except Exception:  # noqa: BLE001 - NVML_ERROR_NOT_FOUND: no process used the GPU since t_us
            return 0, 0
        mine = [(int(s.smUtil), int(s.timeStamp)) for s in samples
                if int(s.pid) == self.pid and int(s.timeStamp) > t_us and int(s.smUtil) > 0]
        return max((u for u, _ in mine), default=0), max((t for _, t in mine), default=0)

    def active_since(self, t_us: int) -> int:
        """The worker's highest SM % over NVML's samples newer than ``t_us`` (0: none active)."""
        return self._latest_active(t_us)[0]

    def wait_quiet(self, timeout_s: float = 2.0) -> int:
        """Called with the worker stopped: wait until a sample period and a margin passed since the stop and
        since the worker's last active sample (at most ``timeout_s``). Returns the time (us) after which an
        active sample can only show work that ran after the stop: a sample's activity lies up to one period
        before its timestamp, so the worker's own timed batch, which ended before it was stopped, never
        counts against it."""
        quiet_us = self.period_us + self.period_us // 4 + 2_000
        start = self.now_us()
        last = start
        while True:
            now = self.now_us()
            last = max(last, self._latest_active(start - self.period_us)[1])
            if now - last >= quiet_us or now - start >= timeout_s * 1e6:
                return now
            time.sleep(0.002)
