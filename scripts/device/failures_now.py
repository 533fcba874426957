"""pytest plugin for device runs: each failure's traceback is written the moment the test ends.

A GPU-test call cut by its time limit never reaches pytest's summary, so its failures came back as names without
reasons (2026-12-05: three FAILED lines, no traceback). Loaded by gpu_tests.sh with ``-p failures_now``; the file
is $ASTRA_SGLANG_FAILURES (default ./failures.log).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not report.failed or os.environ.get("PYTEST_XDIST_WORKER"):  # under xdist the controller writes it, once
        return
    path = Path(os.environ.get("ASTRA_SGLANG_FAILURES", "failures.log"))
    with path.open("a") as f:
        f.write(f"==== {report.nodeid} ({report.when}) ====\n{report.longreprtext}\n\n")
