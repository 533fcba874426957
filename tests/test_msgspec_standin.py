"""Where msgspec is missing (the H200 image), SGLang's msgspec Structs still load: the stand-in gives the same
fields, defaults, frozen hashing and keyword construction; where msgspec is installed it is never used."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


def test_structs_behave_like_records_without_msgspec() -> None:
    res = _run('''
        import sys
        sys.modules["msgspec"] = None   # `import msgspec` fails, as on the GPU image
        from astra_sglang.loader.msgspec_standin import install_if_missing
        assert install_if_missing() and install_if_missing()
        import msgspec
        from typing import ClassVar, Optional

        class Cap(msgspec.Struct, frozen=True):
            device: str
            arch: Optional[int] = None
            CUDA: ClassVar["Cap"]

        Cap.CUDA = Cap("cuda")
        a, b = Cap("cuda", 90), Cap(device="cuda", arch=90)
        assert a == b and hash(a) == hash(b) and len({a, b, Cap.CUDA}) == 2 and Cap.CUDA.arch is None
        try:
            a.arch = 1
        except Exception as e:
            print("frozen:", type(e).__name__)

        class Result(msgspec.Struct):
            x: int
            y: int = 2
        r = Result(1)
        r.y = 5
        print("ok", r.x, r.y)
    ''')
    assert res.returncode == 0, res.stderr
    assert "frozen: FrozenInstanceError" in res.stdout and "ok 1 5" in res.stdout


def test_the_real_msgspec_wins_where_installed() -> None:
    pytest.importorskip("msgspec")
    res = _run('''
        from astra_sglang.loader.msgspec_standin import install_if_missing
        assert install_if_missing() is False
        import msgspec
        assert not getattr(msgspec, "__astra_standin__", False) and hasattr(msgspec, "json")
    ''')
    assert res.returncode == 0, res.stderr
