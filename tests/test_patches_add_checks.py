"""``patches add`` refuses, in one line and exit 2 with nothing written, a source that could never serve:
the wrong language for its kind, one the static screen rejects, one that does not import or build, and a patch
whose ``validated_on`` would be empty."""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_sglang.cli.main import main

REPO = Path(__file__).resolve().parents[1]
VALID = ["--sglang-version", "0.5.23", "--arch", "cpu-interpret"]


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES_DIR", str(tmp_path / "patches"))
    monkeypatch.setenv("ASTRA_SGLANG_STATE_FILE", str(tmp_path / "state.json"))
    return tmp_path / "patches"


def _add(op: str, src: Path, *extra: str) -> list[str]:
    return ["patches", "add", "--op", op, "--source", str(src), "--id", "p1", "--provenance", "hand-written", *extra]


def _refused(capsys, root: Path, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("astra-sglang: error: "), err
    assert not root.exists() or not any(root.rglob("*")), list(root.rglob("*"))   # nothing written
    return err[0].removeprefix("astra-sglang: error: ")


def test_a_py_that_is_not_python_and_a_cuh_passed_as_triton(root, tmp_path, capsys):
    bad = tmp_path / "k.py"
    bad.write_text("__global__ void merge_state(float* o) { o[0] = 1; }\n")
    line = _refused(capsys, root, _add("merge_state", bad, *VALID))
    assert line.startswith("k.py is not Python (line 1: ") and "a triton patch is a Triton .py source" in line
    cuh = tmp_path / "k.cuh"
    cuh.write_text(bad.read_text())
    line = _refused(capsys, root, _add("merge_state", cuh, "--kind", "triton", *VALID))
    assert line.startswith("k.cuh is not Python")
    assert "merge_state is a triton op: a cuda_jit kernel cannot be built against it" in _refused(
        capsys, root, _add("merge_state", cuh, *VALID))


def test_static_screen_and_import_failures(root, tmp_path, capsys):
    cheat = tmp_path / "cheat.py"
    cheat.write_text("import os\n\ndef merge_state_triton(*a):\n    return os.getpid()\n")
    line = _refused(capsys, root, _add("merge_state", cheat, *VALID))
    assert line.startswith("cheat.py refused by the static screen: screen: forbidden-import: line 1"), line
    wrong_name = tmp_path / "wrong.py"
    wrong_name.write_text("def merge_states(*a):\n    return None\n")
    line = _refused(capsys, root, _add("merge_state", wrong_name, *VALID))
    assert line.startswith("wrong.py does not import: ") and "defines no function 'merge_state_triton'" in line


def test_validated_on_is_never_empty(root, capsys):
    src = REPO / "tests" / "candidates" / "merge_state" / "hand_written.py"
    line = _refused(capsys, root, _add("merge_state", src))
    assert line.startswith("validated_on would be empty: pass --sglang-version and --arch"), line
    line = _refused(capsys, root, _add("merge_state", src, "--sglang-version", "0.5.23"))
    assert line.startswith("validated_on would be empty: pass --arch"), line
    assert main(_add("merge_state", src, *VALID)) == 0
    out = capsys.readouterr().out.strip()
    assert out == (f"added p1 at {root / 'merge_state' / 'p1'} (validated on SGLang 0.5.23 / cpu-interpret; screen "
                   "passed; imported under TRITON_INTERPRET=1, defines merge_state_triton)")


@pytest.mark.nvcc
def test_a_cuh_that_does_not_compile(root, tmp_path, capsys, restored_op):
    restored_op("silu_and_mul")
    src = tmp_path / "k.cuh"
    text = (REPO / "tests" / "candidates" / "silu_and_mul" / "hand_written.cuh").read_text()
    src.write_text(text + "\nthis is not C++;\n")
    line = _refused(capsys, root, _add("silu_and_mul", src, "--sglang-version", "0.5.23", "--arch", "sm_90"))
    assert line.startswith("k.cuh does not build (bfloat16): "), line
    assert "error" in line
