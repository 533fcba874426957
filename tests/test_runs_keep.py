"""Model runs survive a bare machine (scripts/runs_keep.sh): what a resume needs is kept in the tracked
model-runs/, what quotes SGLang's sources (the model requests in calls/) never is."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_a_kept_run_comes_back_without_its_model_requests(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "runs_keep.sh", tmp_path / "scripts")
    shutil.copy(REPO / "scripts" / "runs_keep_original.py", tmp_path / "scripts")
    run = tmp_path / "runs" / "decode_attention" / "mr-x"
    (run / "calls").mkdir(parents=True)
    (run / "calls" / "00001-r000-testing.json").write_text('{"messages": "SGLang source"}')
    (run / "rounds" / "r001" / "c0").mkdir(parents=True)
    (run / "rounds" / "r001" / "c0" / "candidate.py").write_text("# the model's kernel\n")
    (run / "run.json").write_text("{}")
    item = tmp_path / "runs" / "queue-da" / "mr-x--r001-c0"
    item.mkdir(parents=True)
    (item / "result.json").write_text("{}")

    def keep(verb: str) -> None:
        subprocess.run(["bash", str(tmp_path / "scripts" / "runs_keep.sh"), verb], check=True, capture_output=True,
                       env={**os.environ, "PYTHON": sys.executable})

    keep("save")
    kept = sorted(str(p.relative_to(tmp_path / "model-runs")) for p in (tmp_path / "model-runs").rglob("*")
                  if p.is_file())
    assert kept == ["decode_attention/mr-x/rounds/r001/c0/candidate.py", "decode_attention/mr-x/run.json",
                    "queue-da/mr-x--r001-c0/result.json"], kept
    shutil.rmtree(tmp_path / "runs")  # the next session's bare machine
    keep("restore")
    assert (run / "rounds" / "r001" / "c0" / "candidate.py").read_text() == "# the model's kernel\n"
    assert (item / "result.json").is_file() and not (run / "calls").exists()


def test_round_zeros_verbatim_sglang_kernel_is_never_kept_and_comes_back_from_extracted(tmp_path, restored_op):
    """A run's round-0 record held the original SGLang kernel verbatim, and save committed it (2026-12-05)."""
    op = restored_op("decode_attention")
    from astra_sglang.contract.op import load_manifest

    original = (op / load_manifest(op).recipe.source).read_text()
    (tmp_path / "scripts").mkdir()
    for name in ("runs_keep.sh", "runs_keep_original.py"):
        shutil.copy(REPO / "scripts" / name, tmp_path / "scripts")
    (tmp_path / "extracted").mkdir()
    (tmp_path / "extracted" / "decode_attention").symlink_to(op)
    record = tmp_path / "runs" / "decode_attention" / "mr-x" / "rounds" / "r000" / "record.json"
    record.parent.mkdir(parents=True)
    (record.parents[2] / "run.json").write_text("{}")
    data = {"round": 0, "source": original, "candidate_sha256": hashlib.sha256(original.encode()).hexdigest()}
    record.write_text(json.dumps(data))
    plan = record.parents[1] / "r001" / "plan.json"  # an agent's transcript quotes it inside its request
    plan.parent.mkdir()
    plan_data = {"transcript": [{"items": [{"content": f"## the kernel\n```python\n{original}```\nmake it fast"}]}]}
    plan.write_text(json.dumps(plan_data))

    def keep(verb: str) -> None:
        subprocess.run(["bash", str(tmp_path / "scripts" / "runs_keep.sh"), verb], check=True, capture_output=True,
                       env={**os.environ, "PYTHON": sys.executable}, cwd=REPO)

    keep("save")
    kept = (tmp_path / "model-runs" / "decode_attention" / "mr-x" / "rounds" / "r000" / "record.json").read_text()
    kept_plan = (tmp_path / "model-runs" / "decode_attention" / "mr-x" / "rounds" / "r001" / "plan.json").read_text()
    assert "SGLang Team" not in kept and "SGLang Team" not in kept_plan and "sha256" in kept
    shutil.rmtree(tmp_path / "runs")
    keep("restore")
    assert json.loads(record.read_text()) == data and json.loads(plan.read_text()) == plan_data
