"""README's main job re-run on a clean checkout must leave the committed contracts, and the patches pinned to them, as
they were: it once rewrote two manifests (fields at their default added), every patch refused ("changed since the
patch was validated") and 13 tests failed after it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from astra_sglang.contract.op import load_manifest, manifest_sha256
from astra_sglang.contract.patch import load_patch_manifest
from astra_sglang.contract.validation import current_validation

REPO = Path(__file__).resolve().parents[1]
MAIN_JOB = ["silu_and_mul", "fused_add_rmsnorm", "merge_state"]  # README's main job

pytestmark = pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(),
                                reason="needs the git checkout (which files are committed)")


def _committed(op: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", f"extracted/{op}"], cwd=REPO, capture_output=True, text=True, check=True)
    return [p.removeprefix(f"extracted/{op}/") for p in out.stdout.split()]


def _copy_committed(ops: list[str], dest: Path) -> dict[str, bytes]:
    before = {}
    for op in ops:
        for rel in _committed(op):
            src, dst = REPO / "extracted" / op / rel, dest / op / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            before[f"{op}/{rel}"] = src.read_bytes()
    return before


def _extract(ops: list[str], out: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "astra_sglang", "extract", *ops, "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]


def _changed(before: dict[str, bytes], root: Path) -> list[str]:
    return [rel for rel, data in before.items() if (root / rel).read_bytes() != data]


def test_main_job_leaves_committed_files_and_patch_pins_as_they_were(tmp_path: Path) -> None:
    before = _copy_committed(MAIN_JOB, tmp_path)
    _extract(MAIN_JOB, tmp_path)
    assert _changed(before, tmp_path) == []
    # the patches and the validation records pinned to these contracts still accept them
    os.environ["ASTRA_SGLANG_EXTRACTED_DIR"] = str(tmp_path)
    try:
        from astra_sglang.patches.registry import op_problem

        for mpath in sorted((REPO / "patches").glob("*/*/manifest.json")):
            m = load_patch_manifest(mpath.parent)
            if m.op in MAIN_JOB:
                assert op_problem(m) is None, m.patch_id
    finally:
        del os.environ["ASTRA_SGLANG_EXTRACTED_DIR"]
    for op in MAIN_JOB:
        assert current_validation(tmp_path / op) is not None, op


def test_call_sites_do_not_depend_on_what_else_is_extracted(tmp_path: Path) -> None:
    """The call-site scan reads sys.modules: extracted alone, per_token_group_quant_fp8 missed the binding in
    moe_runner.deep_gemm that extracting every op found."""
    before = _copy_committed(["per_token_group_quant_fp8"], tmp_path)
    _extract(["per_token_group_quant_fp8"], tmp_path)
    assert _changed(before, tmp_path) == []


def test_pin_ignores_fields_at_their_default_but_not_values(tmp_path: Path) -> None:
    src = REPO / "extracted" / "merge_state"
    shutil.copytree(src, tmp_path / "merge_state", ignore=shutil.ignore_patterns("src", "build", "baseline_src"))
    folder = tmp_path / "merge_state"
    pinned = manifest_sha256(folder)
    raw = json.loads((folder / "manifest.json").read_text())
    assert raw.pop("inputs") is None and raw["provenance"] == {"kind": "hand-written", "model": None, "attempts": None,
                                                                 "note": ""}
    del raw["provenance"]
    (folder / "manifest.json").write_text(json.dumps(raw, indent=4))  # another layout, two defaults left out
    assert manifest_sha256(folder) == pinned
    raw["tolerances"]["bfloat16"]["rtol"] = raw["tolerances"]["bfloat16"]["rtol"] * 2
    (folder / "manifest.json").write_text(json.dumps(raw))
    assert manifest_sha256(folder) != pinned
    assert load_manifest(folder).tolerances["bfloat16"].rtol == raw["tolerances"]["bfloat16"]["rtol"]
