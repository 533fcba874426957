"""Model runs survive a bare machine (scripts/runs_keep.sh): what a resume needs is kept in the tracked
model-runs/, what quotes SGLang's sources (the model requests in calls/) never is."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _kept(root: Path) -> dict[str, bytes]:
    """Every file model-runs/ holds, by its path under runs/, read out of the archives."""
    out: dict[str, bytes] = {}
    for archive in sorted((root / "model-runs").glob("*.tar.xz")):
        with tarfile.open(archive) as tar:
            for m in tar.getmembers():
                if m.isfile():
                    f = tar.extractfile(m)
                    assert f is not None
                    out[m.name.removeprefix("./")] = f.read()
    return out


def _install(root: Path) -> None:
    """runs_keep.sh and its helper copied into ``root``, a checkout of its own."""
    (root / "scripts").mkdir()
    for name in ("runs_keep.sh", "runs_keep_original.py"):
        shutil.copy(REPO / "scripts" / name, root / "scripts")


def _keep(root: Path, verb: str, cwd: Path | None = None) -> None:
    subprocess.run(["bash", str(root / "scripts" / "runs_keep.sh"), verb], check=True, capture_output=True,
                   env={**os.environ, "PYTHON": sys.executable}, cwd=cwd)


def test_a_kept_run_comes_back_without_its_model_requests(tmp_path):
    _install(tmp_path)
    run = tmp_path / "runs" / "decode_attention" / "mr-x"
    (run / "calls").mkdir(parents=True)
    (run / "calls" / "00001-r000-testing.json").write_text('{"messages": "SGLang source"}')
    (run / "rounds" / "r001" / "c0").mkdir(parents=True)
    (run / "rounds" / "r001" / "c0" / "candidate.py").write_text("# the model's kernel\n")
    (run / "run.json").write_text("{}")
    item = tmp_path / "runs" / "queue-da" / "mr-x--r001-c0"
    item.mkdir(parents=True)
    (item / "result.json").write_text("{}")


    _keep(tmp_path, "save")
    kept = sorted(_kept(tmp_path))
    assert kept == ["decode_attention/mr-x/rounds/r001/c0/candidate.py", "decode_attention/mr-x/run.json",
                    "queue-da/mr-x--r001-c0/result.json"], kept
    assert sorted(p.name for p in (tmp_path / "model-runs").iterdir()) == [
        "INDEX.txt", "decode_attention.tar.xz", "queue-da.tar.xz"]
    shutil.rmtree(tmp_path / "runs")  # the next session's bare machine
    _keep(tmp_path, "restore")
    assert (run / "rounds" / "r001" / "c0" / "candidate.py").read_text() == "# the model's kernel\n"
    assert (item / "result.json").is_file() and not (run / "calls").exists()


def test_round_zeros_verbatim_sglang_kernel_is_never_kept_and_comes_back_from_extracted(tmp_path, restored_op):
    """A run's round-0 record held the original SGLang kernel verbatim, and save committed it (2026-12-05)."""
    op = restored_op("decode_attention")
    from astra_sglang.contract.op import load_manifest

    original = (op / load_manifest(op).recipe.source).read_text()
    _install(tmp_path)
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


    _keep(tmp_path, "save", REPO)
    files = _kept(tmp_path)
    kept = files["decode_attention/mr-x/rounds/r000/record.json"].decode()
    kept_plan = files["decode_attention/mr-x/rounds/r001/plan.json"].decode()
    assert "SGLang Team" not in kept and "SGLang Team" not in kept_plan and "sha256" in kept
    shutil.rmtree(tmp_path / "runs")
    _keep(tmp_path, "restore", REPO)
    assert json.loads(record.read_text()) == data and json.loads(plan.read_text()) == plan_data


def test_saving_again_keeps_what_runs_lacks_changes_nothing_unchanged_and_packs_the_older_layout(tmp_path):
    """A session that restored only part of the runs must not drop the rest on its next save; an unchanged run
    must not become a new commit (byte-stable archives); the unpacked model-runs/ of earlier sessions is packed."""
    _install(tmp_path)
    legacy = tmp_path / "model-runs" / "e2e-da-h100"
    legacy.mkdir(parents=True)
    (legacy / "e2e.json").write_text('{"ratio": 0.9}')
    run = tmp_path / "runs" / "decode_attention" / "mr-a"
    run.mkdir(parents=True)
    (run / "run.json").write_text("{}")


    _keep(tmp_path, "save")
    first = (tmp_path / "model-runs" / "decode_attention.tar.xz").read_bytes()
    assert not legacy.exists() and _kept(tmp_path)["e2e-da-h100/e2e.json"] == b'{"ratio": 0.9}'
    _keep(tmp_path, "save")
    assert (tmp_path / "model-runs" / "decode_attention.tar.xz").read_bytes() == first
    shutil.rmtree(run)  # this session has another run only
    other = tmp_path / "runs" / "decode_attention" / "mr-b"
    other.mkdir()
    (other / "run.json").write_text("{}")
    _keep(tmp_path, "save")
    assert {"decode_attention/mr-a/run.json", "decode_attention/mr-b/run.json"} <= set(_kept(tmp_path))
    assert "decode_attention/mr-a/run.json" in (tmp_path / "model-runs" / "INDEX.txt").read_text()
