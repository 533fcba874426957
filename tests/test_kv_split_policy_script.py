"""scripts/device/kv_split_policy.py (issue 23: the kv-split policy half of the sweep baseline) as CI can run it: the
Triton interpreter, the contract's test shapes, SGLang's real decode_attention_fwd. Host times of the interpreter
mean nothing; what must hold is that every policy runs SGLang's kernel on the same workload, is compared with the
default, and is labelled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_policy_runs_sglangs_kernel_on_one_workload_and_is_checked_against_the_default(
        tmp_path: Path, restored_op) -> None:
    op = restored_op("decode_attention")
    # a process of its own: the interpreter must be on before triton is first imported (CI, 2026-12-06: in a pytest
    # worker that had imported triton already, tl.cdiv inside SGLang's kernel was a compiled-mode JITFunction)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, str(REPO / "scripts" / "device" / "kv_split_policy.py"), "--op-dir", str(op),
                          "--device", "cpu", "--dtype", "float16", "--splits", "2", "8", "--rep", "2", "--warmup", "1",
                          "--out", str(tmp_path)], env=env, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    rep = json.loads((tmp_path / "kv_split_policy.json").read_text())
    assert "no speed meaning" in rep["method"] and rep["device"].startswith("cpu")
    assert len(rep["rows"]) == 4  # the contract's test shapes
    for row in rep["rows"]:
        pols = [(p["policy"], p["max_kv_splits"]) for p in row["policies"]]
        assert pols == [("dynamic", 8), ("dynamic", 2), ("static", 2), ("static", 8)]
        assert row["policies"][0]["speedup"] == 1.0 and row["policies"][0]["rel_err"] == 0.0
        assert all(p["correct"] and p["rel_err"] < 2e-3 for p in row["policies"]), row["policies"]
    assert "| B S NK G P R QS |" in (tmp_path / "kv_split_policy.md").read_text()
