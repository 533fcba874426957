"""`extract --restore`: a fresh clone holds manifests only; SGLang's files come back from the installed package."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from astra_sglang.contract.base import sha256_file as sha256
from astra_sglang.contract.op import load_manifest
from astra_sglang.contract.restore import restore_folder
from astra_sglang.errors import AstraError

ROOT = Path(__file__).resolve().parents[1]


def _clone_committed_part(tmp_path: Path, op: str) -> Path:
    """What git clone gives: only files the manifest marks committed."""
    src = ROOT / "extracted" / op
    dest = tmp_path / op
    manifest = load_manifest(src)
    dest.mkdir()
    shutil.copy(src / "manifest.json", dest / "manifest.json")
    for f in manifest.files:
        if f.committed:
            (dest / f.path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src / f.path, dest / f.path)
    return dest


@pytest.mark.parametrize("op", ["fused_add_rmsnorm", "merge_state"])
def test_restore_refills_a_clone_and_every_hash_matches(tmp_path, op):
    dest = _clone_committed_part(tmp_path, op)
    copied = len(restore_folder(dest).copied)
    manifest = load_manifest(dest)
    assert copied == sum(not f.committed for f in manifest.files) > 0
    assert all(sha256(dest / f.path) == f.sha256 for f in manifest.files)


def test_restore_refuses_an_edited_committed_file(tmp_path):
    dest = _clone_committed_part(tmp_path, "silu_and_mul")
    (dest / "reference.py").write_text((dest / "reference.py").read_text() + "\n# edited\n")
    with pytest.raises(AstraError, match="reference.py: SHA-256 differs"):
        restore_folder(dest)


def test_restore_cli_reports_one_line_on_a_bad_folder(tmp_path):
    dest = _clone_committed_part(tmp_path, "silu_and_mul")
    (dest / "manifest.json").write_text("{not json")
    r = subprocess.run([sys.executable, "-m", "astra_sglang", "extract", "--restore", "--out", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1 and "not valid JSON" in r.stderr


def test_materialize_completes_a_committed_only_folder_in_a_cache(tmp_path):
    """A wheel carries only the committed part of an op folder; the plugin needs SGLang's headers back."""
    from astra_sglang.contract.restore import is_complete, materialize

    clone = _clone_committed_part(tmp_path, "fused_add_rmsnorm")
    assert not is_complete(clone)
    done = materialize(clone, tmp_path / "cache")
    assert done != clone and is_complete(done, for_build=True) and not is_complete(clone, for_build=True)
    assert not (done / "baseline_src").exists()  # FlashInfer's files: the harness's, never a build's
    from astra_sglang.contract.base import umask

    assert done.stat().st_mode & 0o777 == 0o777 & ~umask()  # a shared cache: not mkdtemp's 0700
    assert materialize(clone, tmp_path / "cache") == done  # reused, keyed by the manifest's hash
    restored = ROOT / "extracted" / "fused_add_rmsnorm"
    assert materialize(restored, tmp_path / "cache") == restored
