"""``patches status``: the per-process records of one server (``pg-<pgid>/*.json``) added up, one row per patch."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from astra_sglang.contract.base import pid_alive
from astra_sglang.contract.status import ProcessStatus, read_process_status
from astra_sglang.errors import AstraError

SUMMED = ("served_by_patch", "served_by_original", "passed_on", "captured_by_patch", "captured_by_original")


def server_dirs(folder: Path) -> list[Path]:
    """``folder`` itself when it holds records, else its ``pg-*`` folders (one per server), newest first."""
    folder = Path(folder)
    if not folder.is_dir():
        raise AstraError(f"no status folder {folder}: no server with ASTRA_SGLANG_PATCHES set has run with "
                         "this ASTRA_SGLANG_STATUS_DIR (or pass --dir)")
    if any(folder.glob("*.json")):
        return [folder]
    groups = [d for d in folder.glob("pg-*") if d.is_dir() and any(d.glob("*.json"))]
    return sorted(groups, key=lambda d: max(p.stat().st_mtime for p in d.glob("*.json")), reverse=True)


def aggregate(folder: Path) -> dict[str, Any]:
    """One server: its processes, and per patch the state in each process, summed counts and every reason."""
    records: list[ProcessStatus] = []
    unreadable: list[str] = []
    for p in sorted(Path(folder).glob("*.json")):
        try:
            records.append(read_process_status(p))
        except ValueError as e:
            unreadable.append(str(e))
    procs = [{"pid": r.pid, "process": r.process, "running": not r.exited and _still_runs(r), "updated": r.updated,
              "selected": r.selected} for r in records]
    patches: dict[str, dict[str, Any]] = {}
    for r in records:
        for c in r.patches:
            row = patches.setdefault(c.patch_id, {"patch_id": c.patch_id, "op": c.op, "states": {},
                                                  **{k: 0 for k in SUMMED}, "first_call_checks": [],
                                                  "fallbacks": [], "reasons": []})
            row["states"][str(r.pid)] = c.state
            for k in SUMMED:
                row[k] += getattr(c, k)
            for key, value in (("first_call_checks", c.first_call_check), ("reasons", c.reason)):
                if value and value not in row[key]:
                    row[key].append(value)
            row["fallbacks"].extend(f"pid {r.pid}: {f}" for f in c.fallbacks)
    return {"dir": str(folder), "processes": procs, "patches": sorted(patches.values(), key=lambda x: x["patch_id"]),
            "unreadable": unreadable, "stale": not any(p["running"] for p in procs)}


def _still_runs(r: ProcessStatus) -> bool:
    """The process that wrote ``r`` is alive: its pid runs and (where /proc tells) was not reused by a process
    started after the record's plugin load. An idle server writes nothing, so a record's age proves nothing."""
    if not pid_alive(r.pid):
        return False
    try:
        ticks = int(Path(f"/proc/{r.pid}/stat").read_text().rpartition(")")[2].split()[19])
        boot = next(float(ln.split()[1]) for ln in Path("/proc/stat").read_text().splitlines()
                    if ln.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):  # no /proc (macOS), or the process just exited
        return True
    return boot + ticks / os.sysconf("SC_CLK_TCK") <= r.started + 2.0  # 2 s: btime is rounded to the second


def stale_line(srv: dict[str, Any]) -> str:
    """One line for a server none of whose processes runs: ``patches status`` shows such folders only with --all."""
    last = max((p["updated"] for p in srv["processes"]), default=None)
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(last)) if last is not None else "unknown"
    n = len(srv["processes"]) + len(srv["unreadable"])
    return (f"{Path(srv['dir']).name}: {n} process{'es' if n != 1 else ''}, none alive, last record {when} "
            "- stale; `--all` to show")


def states_text(states: dict[str, str]) -> str:
    """'active x2, pending x3' when the processes agree in groups; the pids matter only for the odd ones out."""
    by: dict[str, list[str]] = {}
    for pid, st in states.items():
        by.setdefault(st, []).append(pid)
    return ", ".join(f"{st} x{len(pids)}" if len(pids) > 1 else f"{st} (pid {pids[0]})" for st, pids in sorted(by.items()))
