"""A server process's patch record must hold its counts even though it is killed, not exited.

On the H200 (2026-12-04) `validate` read the decode-attention patch as "active but served no call": its calls were
all made during CUDA-graph capture within a second of the record written at activation, decode replays make no
Python call, and SGLang ends its scheduler with a signal that skips atexit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

CHILD = r"""
import sys, time
from astra_sglang.patches import status, status_file
st = status.get("p1", "decode_attention")
st.state = "active"
st.first_call_check = "passed"
status_file.start()                  # the record written at activation
for _ in range(192):                 # capture: every call inside the same second, each with its tick
    st.served_by_patch += 1
    st.captured_by_patch += 1
    status_file.tick()
print("ready", flush=True)
time.sleep(60)                       # graph replays: no Python call, no tick
"""


def test_counts_reach_the_record_of_a_process_killed_after_graph_capture(tmp_path: Path) -> None:
    env = dict(os.environ, ASTRA_SGLANG_STATUS_DIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(2.5)                  # more than the flusher's second
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    records = list(tmp_path.glob("pg-*/*.json"))
    assert len(records) == 1
    rec = json.loads(records[0].read_text())
    row = rec["patches"][0]
    assert (row["served_by_patch"], row["captured_by_patch"]) == (192, 192)
    assert rec["exited"] is False
