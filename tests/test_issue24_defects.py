"""Issue 24's small defects, each pinned by what a user relies on: an nvcc check that could not build says so, an op
manifest is never left half-written, and a malformed patch manifest is one error line from the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from h_fixtures.ops import make_h_scale

from astra_sglang.cli.main import main
from astra_sglang.contract.op import CudaJitRecipe, load_manifest, write_manifest
from astra_sglang.loop import evaluator


def test_a_compile_only_check_that_could_not_build_reports_not_built(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The coding agent reads BUILD OK as "this compiles": an nvcc check that never built must not say it."""
    from astra_sglang.loader import cuda_build

    op = make_h_scale(tmp_path)

    def no_toolchain(*args: object, **kwargs: object) -> None:
        raise FileNotFoundError("nvcc not found under /nowhere")

    monkeypatch.setattr(cuda_build, "build_cuda_module", no_toolchain)
    m = load_manifest(op)
    assert isinstance(m.recipe, CudaJitRecipe)
    report = evaluator._compile_only(op, m, op / m.recipe.sources[0])
    assert report.built is False
    assert "BUILD FAILED" in report.text() and "BUILD OK" not in report.text()
    assert "FileNotFoundError: nvcc not found under /nowhere" in report.text()


def test_a_failure_mid_write_leaves_the_previous_op_manifest_intact(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    op = make_h_scale(tmp_path)
    before = load_manifest(op)
    old_text = (op / "manifest.json").read_text()
    real_write_text = Path.write_text

    def half_then_full_disk(self: Path, data: str, *args: object, **kwargs: object) -> int:
        real_write_text(self, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", half_then_full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_manifest(op, before.model_copy(update={"short_name": "h_scale_renamed"}))
    monkeypatch.undo()
    assert (op / "manifest.json").read_text() == old_text
    assert load_manifest(op) == before
    assert not list(op.glob(".manifest.json.*.tmp"))  # and no half-written temporary file left beside it


def test_a_malformed_patch_manifest_is_one_error_line_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """`patches guard` reads the patch manifest itself: its refusal must be the CLI's one line, not a traceback."""
    patch = tmp_path / "patches" / "merge_state" / "broken-patch"
    patch.mkdir(parents=True)
    (patch / "manifest.json").write_text("{not json")
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES_DIR", str(tmp_path / "patches"))
    rc = main(["patches", "guard", "broken-patch", "--evidence", str(tmp_path / "evidence.json")])
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert rc == 2 and len(err) == 1, captured.err
    assert err[0].startswith("astra-sglang: error: ") and "manifest.json: not valid JSON" in err[0]
    assert "Traceback" not in captured.err + captured.out
