"""tests/conftest.py's promises: an unrestored SGLang file skips locally and fails under CI=true (with the fix
in the message); the gpu marker skips without CUDA. Run on a copy of the conftest in a scratch repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

_TESTS = '''
import pytest

def test_needs_restored(restored_op):
    assert (restored_op("softcap_inplace_logits") / "manifest.json").is_file()

def test_stand_in_when_not_restored(restored_op_or_none):
    assert restored_op_or_none("softcap_inplace_logits") is None

def test_needs_sglang_part():
    pytest.importorskip("sglang.no_such_module_h")

def test_needs_an_optional_extra():
    pytest.importorskip("no_such_package_h")

@pytest.mark.gpu
def test_on_the_gpu():
    import torch
    assert torch.cuda.is_available()
'''


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    (tmp_path / "tests").mkdir()
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "tests" / "conftest.py")
    (tmp_path / "tests" / "test_scratch.py").write_text(_TESTS)
    op = tmp_path / "extracted" / "softcap_inplace_logits"
    op.mkdir(parents=True)
    shutil.copy(REPO / "extracted" / "softcap_inplace_logits" / "manifest.json", op)  # its SGLang file: absent
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: g\n    nvcc: n\n")
    return tmp_path


def _run(scratch: Path, ci: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = "true"
    return subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "tests"], cwd=scratch,
                          capture_output=True, text=True, env=env, timeout=300)


def test_unrestored_sglang_file_skips_locally(scratch: Path) -> None:
    out = _run(scratch, ci=False)
    assert "SKIPPED" in out.stdout and "extract --restore" in out.stdout, out.stdout
    assert "PASSED tests/test_scratch.py::test_stand_in_when_not_restored" in out.stdout, out.stdout
    assert "FAILED" not in out.stdout, out.stdout


def test_missing_package_that_ci_installs_fails_under_ci_only(scratch: Path) -> None:
    local, ci = _run(scratch, ci=False), _run(scratch, ci=True)
    assert "FAILED tests/test_scratch.py::test_needs_sglang_part" not in local.stdout, local.stdout
    assert "FAILED tests/test_scratch.py::test_needs_sglang_part" in ci.stdout, ci.stdout
    assert "scripts/setup_env.sh installs it" in ci.stdout
    assert "FAILED tests/test_scratch.py::test_needs_an_optional_extra" not in ci.stdout  # not one CI installs


def test_unrestored_sglang_file_fails_under_ci(scratch: Path) -> None:
    out = _run(scratch, ci=True)
    assert out.returncode == 1, out.stdout
    for name in ("test_needs_restored", "test_stand_in_when_not_restored"):
        assert f"FAILED tests/test_scratch.py::{name}" in out.stdout, out.stdout
    assert "CI=true: extracted/softcap_inplace_logits lacks SGLang's file" in out.stdout
    assert "run `astra-sglang extract --restore`" in out.stdout


def test_gpu_marker_skips_without_cuda(scratch: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the gpu test runs")
    out = _run(scratch, ci=True)  # CI has no GPU: a skip, not a failure
    assert "SKIPPED" in out.stdout and "needs a CUDA GPU" in out.stdout, out.stdout
    assert "FAILED tests/test_scratch.py::test_on_the_gpu" not in out.stdout


def test_a_measurement_is_named_for_the_gpu_that_took_it(tmp_path: Path) -> None:
    """A GPU test's measurement file, and the label inside it, name the GPU that measured it: an H100's
    said "h200_patch_..." inside (2026-12-08), so a reader of the file alone took H100 numbers for H200 ones."""
    from conftest import measurement_path

    assert measurement_path(tmp_path, "h200_patch_x", "NVIDIA H100 80GB HBM3").stem == "h100_patch_x"
    assert measurement_path(tmp_path, "h200_patch_x", "NVIDIA H200").stem == "h200_patch_x"
    assert measurement_path(tmp_path, "scripted_runs", "NVIDIA H100 80GB HBM3").stem == "scripted_runs"
