"""Model runs survive a bare machine (scripts/runs_keep.sh): what a resume needs is kept in the tracked
model-runs/, what quotes SGLang's sources (the model requests in calls/) never is."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_a_kept_run_comes_back_without_its_model_requests(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "runs_keep.sh", tmp_path / "scripts")
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
        subprocess.run(["bash", str(tmp_path / "scripts" / "runs_keep.sh"), verb], check=True, capture_output=True)

    keep("save")
    kept = sorted(str(p.relative_to(tmp_path / "model-runs")) for p in (tmp_path / "model-runs").rglob("*")
                  if p.is_file())
    assert kept == ["decode_attention/mr-x/rounds/r001/c0/candidate.py", "decode_attention/mr-x/run.json",
                    "queue-da/mr-x--r001-c0/result.json"], kept
    shutil.rmtree(tmp_path / "runs")  # the next session's bare machine
    keep("restore")
    assert (run / "rounds" / "r001" / "c0" / "candidate.py").read_text() == "# the model's kernel\n"
    assert (item / "result.json").is_file() and not (run / "calls").exists()
