"""Bad input gives one clear line, a non-zero exit, and never a half-written folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sglang")

from astra_sglang.cli.main import main  # noqa: E402
from astra_sglang.errors import AstraError  # noqa: E402


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("astra-sglang: error:"), err
    return err[0]


def test_unknown_op_suggests_close_matches(capsys, tmp_path: Path) -> None:
    line = _one_line_error(capsys, ["extract", "silu_and_mull", "--out", str(tmp_path)])
    assert "unknown op 'silu_and_mull'" in line and "silu_and_mul" in line
    assert list(tmp_path.iterdir()) == []


def test_ambiguous_short_name_lists_candidates(capsys, tmp_path: Path) -> None:
    line = _one_line_error(capsys, ["extract", "softcap", "--out", str(tmp_path)])
    assert "ambiguous" in line and "activation.softcap_inplace_logits" in line
    assert list(tmp_path.iterdir()) == []


def test_compiled_only_op_is_refused_with_reason(capsys, tmp_path: Path) -> None:
    from astra_sglang.extract.discovery import list_ops

    op = next(i.op_id for i in list_ops() if i.source_kind == "compiled_only")
    line = _one_line_error(capsys, ["extract", op, "--out", str(tmp_path)])
    assert "compiled only" in line
    assert list(tmp_path.iterdir()) == []


def test_unparseable_triton_source_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from astra_sglang.extract.catalog.ops.merge_state import ENTRY as MERGE_STATE
    from astra_sglang.extract.extractor import write_op

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "astra_bad_triton_mod.py").write_text("import triton\n@triton.jit\ndef k(:\n")
    monkeypatch.syspath_prepend(str(pkg))
    bad = dataclasses.replace(MERGE_STATE, short_name="bad", wrapper="astra_bad_triton_mod:wrap")
    out = tmp_path / "out"
    with pytest.raises(AstraError, match="cannot parse"):
        write_op(bad, out)
    assert list(out.iterdir()) == []


def test_failure_keeps_the_previous_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from astra_sglang.extract import extractor
    from astra_sglang.extract.catalog.ops.merge_state import ENTRY as MERGE_STATE

    out = tmp_path / "out"
    extractor.write_op(MERGE_STATE, out)
    before = (out / "merge_state" / "manifest.json").read_text()

    def boom(*args, **kwargs):
        raise AstraError("simulated failure")

    monkeypatch.setattr(extractor, "_kept_traced", boom)
    with pytest.raises(AstraError):
        extractor.write_op(MERGE_STATE, out)
    assert (out / "merge_state" / "manifest.json").read_text() == before
    assert sorted(p.name for p in out.iterdir()) == ["merge_state"]


def test_sglang_not_installed_is_one_line() -> None:
    code = (
        "import sys; sys.modules['sglang'] = None\n"
        "from astra_sglang.cli.main import main\n"
        "raise SystemExit(main(['extract', '--list']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "SGLang is not installed" in lines[0]
