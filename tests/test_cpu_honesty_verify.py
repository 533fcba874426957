"""``TRITON_INTERPRET=1 patches verify``: the route the tool suggests on a host without a GPU. It ran the served
check shapes (T=512) in the interpreter, silent for 25 minutes; now it checks small shapes, says each case on
stderr, and labels the result a correctness-only interpreter check that records nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("sglang")  # verify compares with the installed SGLang's function

PID = "merge-state-mr-k1"


def test_the_interpreter_check_uses_small_shapes_its_guard_admits():
    from astra_sglang.patches.registry import find
    from astra_sglang.patches.tooling.verify import interpreter_check

    m = find(PID).manifest
    assert m is not None and max(d["T"] for d in m.check_shapes) >= 32  # served shapes took 25 minutes there
    small = interpreter_check(m)
    assert small.check_shapes == [{"T": 1, "NH": 1, "D": 64}, {"T": 5, "NH": 5, "D": 64}, {"T": 3, "NH": 3, "D": 64}]
    for dims in small.check_shapes:  # every one reaches the patch: the guard's minimums admit it
        assert all(small.guard.dims[k].accepts(v) for k, v in dims.items())
    assert {k: r.max for k, r in small.guard.dims.items()} == {k: r.max for k, r in m.guard.dims.items()}
    assert small.guard.regions == [] and m.guard.regions  # the measured regions hold served shapes only
    assert find(PID).manifest.check_shapes == m.check_shapes != small.check_shapes  # the registry's is untouched


def test_interpreter_verify_says_each_case_labels_itself_and_records_nothing(tmp_path):
    """As a user runs it, in a process of its own: Triton picks the interpreter when a kernel is first decorated,
    so setting TRITON_INTERPRET inside a test process that already imported SGLang's kernel checks nothing (CI
    failed so: "0 active drivers")."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU host verifies for real")
    state = tmp_path / "state.json"
    env = {k: v for k, v in os.environ.items() if k != "ASTRA_SGLANG_PATCHES_DIR"}
    env.update(ASTRA_SGLANG_STATE_FILE=str(state), TRITON_INTERPRET="1")
    got = subprocess.run([sys.executable, "-m", "astra_sglang", "patches", "verify", PID, "--record"], env=env,
                         capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stdout[-2000:] + got.stderr[-2000:]
    err = got.stderr.splitlines()
    assert err[0].startswith(f"{PID}: plugin check against SGLang's original on 3 shape(s) x bfloat16 "
                             "(Triton interpreter, small shapes)")
    cases = [line for line in err if line.startswith("  check case ")]
    assert len(cases) == 3 and cases[0] == "  check case 1: the patch and SGLang's original on (1, 1, 64) bfloat16"
    assert f"{PID}: harness on the test shapes (Triton interpreter, correctness only)" in err
    out = got.stdout.splitlines()
    assert out[0].startswith(f"{PID}: OK on cpu-interpret")
    assert "Triton interpreter: a correctness-only check on small shapes below the guard's minimums" in out[1]
    assert "not recorded: an interpreter check is correctness-only" in got.stdout
    assert not state.exists()
