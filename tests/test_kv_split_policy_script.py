"""scripts/device/kv_split_policy.py (issue 23: the kv-split policy half of the sweep baseline) as CI can run it: the
Triton interpreter, the contract's test shapes, SGLang's real decode_attention_fwd. Host times of the interpreter
mean nothing; what must hold is that every policy runs SGLang's kernel on the same workload, is compared with the
default, and is labelled."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_every_policy_runs_sglangs_kernel_on_one_workload_and_is_checked_against_the_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restored_op) -> None:
    op = restored_op("decode_attention")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    spec = importlib.util.spec_from_file_location("kv_split_policy", REPO / "scripts" / "device" / "kv_split_policy.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--op-dir", str(op), "--device", "cpu", "--dtype", "float16", "--splits", "2", "8",
                     "--rep", "2", "--warmup", "1", "--out", str(tmp_path)]) == 0
    rep = json.loads((tmp_path / "kv_split_policy.json").read_text())
    assert "no speed meaning" in rep["method"] and rep["device"].startswith("cpu")
    assert len(rep["rows"]) == 4  # the contract's test shapes
    for row in rep["rows"]:
        pols = [(p["policy"], p["max_kv_splits"]) for p in row["policies"]]
        assert pols == [("dynamic", 8), ("dynamic", 2), ("static", 2), ("static", 8)]
        assert row["policies"][0]["speedup"] == 1.0 and row["policies"][0]["rel_err"] == 0.0
        assert all(p["correct"] and p["rel_err"] < 2e-3 for p in row["policies"]), row["policies"]
    assert "| B S NK G P R QS |" in (tmp_path / "kv_split_policy.md").read_text()
