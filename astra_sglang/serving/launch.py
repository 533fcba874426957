"""Start and stop one SGLang server for the A/B run: its own process group, its own log, its own status folder.

The server gets a session of its own, so its process group id is its pid: every SGLang process it spawns
(tokenizer manager, schedulers, detokenizer) writes the plugin's status record under ``pg-<pid>`` of the
status root we give it, and stopping the group stops them all.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import requests

from astra_sglang.errors import AstraError


@dataclass
class Server:
    name: str
    url: str
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    status_root: Path | None = None
    started_s: float = 0.0
    ready_s: float = 0.0
    command: list[str] = field(default_factory=list)

    @property
    def pgid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def flag_value(args: Sequence[str], *flags: str) -> str | None:
    """The value of a launch_server argument given as ``--flag V`` or ``--flag=V`` under any of ``flags``
    (aliases); given twice, the last one wins, as in SGLang's argparse."""
    found = None
    for i, a in enumerate(args):
        for flag in flags:
            if a == flag and i + 1 < len(args):
                found = args[i + 1]
            elif a.startswith(flag + "="):
                found = a[len(flag) + 1:]
    return found


def server_args(user_args: Sequence[str], port: int, mem_fraction: float) -> list[str]:
    """The user's launch_server arguments plus the port (ours: two servers run side by side) and, unless the
    user set one, a memory fraction small enough for both to fit on one GPU."""
    args = [a for a in user_args if a != "--"]
    if flag_value(args, "--port") is not None:
        raise AstraError("leave --port out of the server arguments: validate picks one port per server")
    args += ["--port", str(port)]
    if flag_value(args, "--host") is None:
        args += ["--host", "127.0.0.1"]
    if flag_value(args, "--mem-fraction-static") is None:
        args += ["--mem-fraction-static", str(mem_fraction)]
    return args


def start(name: str, module: str, args: list[str], patches: str, workdir: Path,
          extra_env: dict[str, str] | None = None) -> Server:
    port = int(flag_value(args, "--port") or 0)
    host = flag_value(args, "--host") or "127.0.0.1"
    log = workdir / f"server-{name}.log"
    status_root = workdir / f"status-{name}"
    env = dict(os.environ, ASTRA_SGLANG_PATCHES=patches, ASTRA_SGLANG_STATUS_DIR=str(status_root),
               PYTHONUNBUFFERED="1", **(extra_env or {}))
    cmd = [sys.executable, "-m", module, *args]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return Server(name=name, url=f"http://{host}:{port}", proc=proc, log=log, status_root=status_root,
                  started_s=time.monotonic(), command=cmd)


def log_tail(server: Server, lines: int = 25) -> str:
    if server.log is None or not server.log.exists():
        return ""
    return "\n".join(server.log.read_text(errors="replace").splitlines()[-lines:])


def wait_ready(server: Server, timeout_s: float) -> None:
    """Until ``/health`` answers 200; the server's exit or the timeout is an error quoting its log."""
    deadline = time.monotonic() + timeout_s
    with requests.Session() as client:
        while time.monotonic() < deadline:
            if server.proc is not None and server.proc.poll() is not None:
                raise AstraError(f"the {server.name} server exited with {server.proc.returncode} before it was "
                                 f"ready; its log ({server.log}) ends:\n{log_tail(server)}")
            try:
                if client.get(f"{server.url}/health", timeout=5.0).status_code == 200:
                    server.ready_s = time.monotonic() - server.started_s
                    return
            except requests.RequestException:
                pass
            time.sleep(1.0)
    raise AstraError(f"the {server.name} server was not ready after {timeout_s:.0f} s; its log ({server.log}) "
                     f"ends:\n{log_tail(server)}")


def stop(server: Server, grace_s: float = 30.0) -> None:
    """SIGTERM to the whole group, SIGKILL to what is left after ``grace_s``."""
    if server.proc is None or server.pgid is None:
        return
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(server.pgid, sig)
        except ProcessLookupError:
            break
        try:
            server.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        if not _group_alive(server.pgid):
            break
        time.sleep(1.0)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def plugin_log_lines(server: Server, limit: int = 40) -> list[str]:
    """The plugin's own lines in the server's log (what it installed, refused, or fell back from)."""
    if server.log is None or not server.log.exists():
        return []
    lines = [x for x in server.log.read_text(errors="replace").splitlines() if "astra-sglang" in x]
    return lines[:limit]
