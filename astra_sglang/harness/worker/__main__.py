"""The worker's entry: ``python -m astra_sglang.harness.worker RFD WFD ARENA_FD``, started by the judge.

The OS sandbox (``harness/shared/sandbox.py``) is installed here, first, before anything else is imported:
Landlock binds only the thread that installs it (and what that thread starts later), and importing torch starts
a thread; no candidate code is imported before the worker's ``Load``. What is in force goes to the judge as the
worker's first message (``process.main``).
"""

from __future__ import annotations

import sys

from astra_sglang.harness.shared import sandbox

LEVEL = sandbox.install()

from astra_sglang.harness.worker import process  # noqa: E402 - after the sandbox: torch starts threads

process.main(sys.argv[1:], LEVEL)
