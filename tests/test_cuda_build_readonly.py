"""The sandboxed worker loads CUDA modules the parent built from a cache it may not write.

On a GPU the worker's sandbox is read-only mounts, whose refusal is EROFS, not the EACCES (PermissionError) that
Landlock gives on a CPU. Treating only PermissionError as "may not write: load, don't build" made every CUDA
candidate (and SGLang's own silu_and_mul and fused_add_rmsnorm) fail "build failed: Read-only file system" in the
H100's GPU tests (2026-12-05).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from h_fixtures.ops import make_h_scale

from astra_sglang.contract.op import load_manifest
from astra_sglang.errors import AstraError
from astra_sglang.loader import cuda_build
from astra_sglang.loader.cuda_build import CudaBuildSpec


def _refuse_writes(monkeypatch: pytest.MonkeyPatch, under: Path, err: int) -> None:
    """Every open for writing and every mkdir beneath ``under`` fails with ``err``, as in the worker's view."""
    real_open, real_mkdir = os.open, Path.mkdir

    def fake_open(path, flags, *a, **k):
        if str(path).startswith(str(under)) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(err, os.strerror(err), str(path))
        return real_open(path, flags, *a, **k)

    def fake_mkdir(self, *a, **k):
        if str(self).startswith(str(under)) and not self.is_dir():
            raise OSError(err, os.strerror(err), str(self))
        return real_mkdir(self, *a, **k)

    monkeypatch.setattr(os, "open", fake_open)  # the module cuda_build calls it through
    monkeypatch.setattr(Path, "mkdir", fake_mkdir)


@pytest.mark.parametrize("err", [errno.EROFS, errno.EACCES])
def test_the_build_lock_is_taken_read_only_where_the_cache_may_not_be_written(tmp_path, monkeypatch, err):
    (tmp_path / ".entry.lock").write_text("")
    _refuse_writes(monkeypatch, tmp_path, err)
    with cuda_build._lock(tmp_path, "entry"):
        pass


def test_other_errors_of_the_lock_are_not_taken_for_a_read_only_cache(tmp_path, monkeypatch):
    _refuse_writes(monkeypatch, tmp_path, errno.ENOSPC)
    with pytest.raises(OSError) as e, cuda_build._lock(tmp_path, "entry"):
        pass
    assert e.value.errno == errno.ENOSPC


@pytest.mark.nvcc
@pytest.mark.parametrize("err", [errno.EROFS, errno.EACCES])
def test_a_worker_on_a_read_only_cache_gets_what_the_parent_built(tmp_path, monkeypatch, err):
    op = make_h_scale(tmp_path / "ops")
    spec = CudaBuildSpec.from_recipe(op, load_manifest(op), "float32")
    built = spec.build(load=False)  # the parent
    cache = built.build_dir.parent
    _refuse_writes(monkeypatch, cache, err)  # the worker
    again = spec.build(load=False)
    assert again.report.cached and again.so_path == built.so_path


@pytest.mark.nvcc
def test_a_worker_on_a_read_only_cache_is_told_the_parent_builds(tmp_path, monkeypatch):
    op = make_h_scale(tmp_path / "ops")
    spec = CudaBuildSpec.from_recipe(op, load_manifest(op), "float32")
    cache = cuda_build.default_cache_dir(op)
    cache.mkdir(parents=True)
    _refuse_writes(monkeypatch, cache, errno.EROFS)
    with pytest.raises(AstraError) as e:
        spec.build(load=False)
    assert "not built yet" in str(e.value) and "builds every CUDA module before its worker starts" in str(e.value)
