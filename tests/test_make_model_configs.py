"""scripts/h200_server/make_model.py with a config name: the config-only model folder e2e and forward runs load with
--load-format dummy (MAKE_MODEL="DIR NAME" in device.sh). It took only llama3-8b, so a MoE e2e (issue 25's
Qwen3-30B-A3B) had no way to get its folder on the device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "h200_server" / "make_model.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=300)


def test_any_profile_config_name_writes_its_config_only_folder(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    r = _run(str(tmp_path / "q"), "qwen3-30b-a3b")
    assert r.returncode == 0, r.stderr
    cfg = json.loads((tmp_path / "q" / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3MoeForCausalLM"] and cfg["num_experts"] == 128
    assert (tmp_path / "q" / "tokenizer.json").is_file()
    bad = _run(str(tmp_path / "x"), "no-such-model")
    assert bad.returncode == 1 and "no config 'no-such-model' (known:" in bad.stderr and "Traceback" not in bad.stderr
