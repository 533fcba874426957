"""This process's patch status on disk, for ``astra-sglang patches status`` to gather across a server's processes.

The record goes to ``$ASTRA_SGLANG_STATUS_DIR`` (default ``<user cache>/status``) under ``pg-<pgid>/<pid>.json``:
SGLang's processes share the launcher's process group, so one folder holds one server. Written at plugin load,
when a patch changes state, at most once a second while calls are served (the hot path only compares a clock
with a deadline: no GPU synchronisation, no I/O unless the second is up), by a background thread within a second
of any change the hot path did not write, and at exit. The thread is what makes the counts true in a server:
after CUDA-graph capture decode replays make no Python call (no tick), and SGLang ends its scheduler with a signal
that skips atexit, so an H200 validate (2026-12-04) read a patch that served every decode step as "served no
call". Atomic, so a reader never sees half a record. Writing is best-effort: a read-only cache costs one
warning, never a served call.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from astra_sglang.data_paths import user_cache
from astra_sglang.patches import status

if TYPE_CHECKING:
    from astra_sglang.contract.status import PatchCounts, ProcessStatus

ENV_STATUS_DIR = "ASTRA_SGLANG_STATUS_DIR"
INTERVAL_S = 1.0

logger = logging.getLogger("astra_sglang.patches")

_lock = threading.Lock()
_next_at = float("inf")  # not recording until start()
_started = 0.0
_warned = False
_at_exit = False
_path: Path | None = None
_written: list[PatchCounts] = []  # what the last record held, so the flusher writes only on a change
_flusher_pid = 0


def status_root() -> Path:
    env = os.environ.get(ENV_STATUS_DIR)
    return Path(env).expanduser() if env else user_cache() / "status"


def group_dir(root: Path | None = None, pgid: int | None = None) -> Path:
    return (root if root is not None else status_root()) / f"pg-{os.getpgid(0) if pgid is None else pgid}"


def record_path() -> Path:
    return group_dir() / f"{os.getpid()}.json"


def start() -> None:
    """Begin recording in this process (the plugin, once patches were asked for): first record now, last at exit."""
    global _next_at, _started, _at_exit, _path
    _path = record_path()
    _started = time.time()
    _next_at = 0.0
    if not _at_exit:
        _at_exit = True
        atexit.register(write_now, True)
    write_now()
    _start_flusher()


def _start_flusher() -> None:
    """One daemon thread per process (a forked child starts its own): it never touches a served call."""
    global _flusher_pid
    if _flusher_pid == os.getpid():
        return
    _flusher_pid = os.getpid()
    threading.Thread(target=_flush_loop, name="astra-sglang-status", daemon=True).start()


def _flush_loop() -> None:
    while True:
        time.sleep(INTERVAL_S)
        if _next_at != float("inf") and _patch_counts() != _written:
            write_now()


def stop() -> None:
    """Stop recording (a process that reinstalls patches, or tests); the record stays as last written."""
    global _next_at
    _next_at = float("inf")


def tick() -> None:
    """The hot path's share: one clock read; the write happens only when a second has passed."""
    if time.monotonic() >= _next_at:
        write_now()


def write_now(exited: bool = False) -> None:
    global _next_at, _warned, _written
    if _next_at == float("inf") or _path is None:
        return
    with _lock:
        _next_at = time.monotonic() + INTERVAL_S
        try:
            from astra_sglang.contract.base import write_atomic

            _written = _patch_counts()
            write_atomic(_path, _snapshot(exited, _written).model_dump_json(indent=1) + "\n")
        except Exception as e:  # never let bookkeeping fail a served call
            if not _warned:
                _warned = True
                logger.warning("astra-sglang: cannot write the patch status record %s (%s: %s); set %s to a "
                               "writable folder", _path, type(e).__name__, e, ENV_STATUS_DIR)


def _patch_counts() -> list[PatchCounts]:
    from astra_sglang.contract.status import PatchCounts

    return [PatchCounts(patch_id=s.patch_id, op=s.op, state=s.state, reason=s.reason,
                        served_by_patch=s.served_by_patch, served_by_original=s.served_by_original,
                        passed_on=s.passed_on,
                        captured_by_patch=s.captured_by_patch, captured_by_original=s.captured_by_original,
                        first_call_check=s.first_call_check, fallbacks=list(s.fallbacks))
            for s in sorted(status.statuses().values(), key=lambda s: s.patch_id)]


def _snapshot(exited: bool, patches: list[PatchCounts]) -> ProcessStatus:
    from astra_sglang.contract.status import ProcessStatus

    return ProcessStatus(pid=os.getpid(), pgid=os.getpgid(0), process=_process_name(), started=_started,
                         updated=time.time(), exited=exited, selected=os.environ.get("ASTRA_SGLANG_PATCHES", ""),
                         patches=patches)


def _process_name() -> str:
    """SGLang retitles its processes (``sglang::scheduler_TP0``): the command line tells them apart."""
    try:
        cmd = Path("/proc/self/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmd = " ".join(sys.argv)
    return cmd[:160]
