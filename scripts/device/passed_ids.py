"""The GPU tests an earlier device run already passed, as pytest node ids, one per line.

Phase 2 of `gpu_tests.sh` (31 timing tests, one at a time) takes longer than one device call, and a call cut by its
limit writes no JUnit file for the phase it was in. So this reads both what a run leaves: JUnit XML (a finished
phase) and the -v log (a cut one: "tests/x.py::name PASSED" lines, "[gwN] [ NN%] PASSED tests/..." under xdist).
gpu_tests.sh turns them into --deselect arguments (PASSED_IN), so the next call starts where the last one stopped.
Usage: python3 scripts/device/passed_ids.py FILE...   (.xml read as JUnit, anything else as a pytest -v log)
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

_LOG = re.compile(r"^(?:\[gw\d+\] \[ *\d+%\] PASSED (?P<a>\S+::\S+)|(?P<b>\S+::\S+) PASSED\b)")


def _from_junit(path: Path) -> list[str]:
    ids = []
    for case in ET.parse(path).iter("testcase"):
        if any(child.tag in ("failure", "error", "skipped") for child in case):
            continue
        module = case.get("classname", "").replace(".", "/")
        ids.append(f"{module}.py::{case.get('name')}")
    return ids


def _from_log(path: Path) -> list[str]:
    found = (_LOG.match(line) for line in path.read_text(errors="replace").splitlines())
    return [m.group("a") or m.group("b") for m in found if m]


def passed_ids(paths: list[Path]) -> list[str]:
    """Node ids that passed in any of the files, each once, in the order first seen."""
    seen: dict[str, None] = {}
    for path in paths:
        for node in _from_junit(path) if path.suffix == ".xml" else _from_log(path):
            seen.setdefault(node, None)
    return list(seen)


if __name__ == "__main__":
    print("\n".join(passed_ids([Path(p) for p in sys.argv[1:]])))
