"""Where nvcc, the host compiler, ninja and tvm-ffi live, resolved the way SGLang's JIT resolves them.

Each lookup fails with one actionable line (AstraError) instead of a ninja or linker error later.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from astra_sglang.errors import AstraError


@functools.cache
def cuda_home() -> Path:
    """CUDA_HOME/CUDA_PATH, else /usr/local/cuda, else the parent of `which nvcc`.

    SGLang guesses from `which nvcc` first; on hosts where /usr/local/bin/nvcc is a wrapper that guess has no
    lib64 and the link fails with "cannot find -lcudart", so the conventional location is tried before it.
    """
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return Path(os.environ[var])
    if Path("/usr/local/cuda/bin/nvcc").exists():
        return Path("/usr/local/cuda")
    nvcc = shutil.which("nvcc")
    if nvcc is not None:
        return Path(nvcc).resolve().parent.parent
    return Path("/usr/local/cuda")


def nvcc_path() -> Path:
    path = cuda_home() / "bin" / "nvcc"
    if not path.exists():
        raise AstraError(f"nvcc not found at {path}: install the CUDA toolkit or set CUDA_HOME")
    return path


@functools.cache
def nvcc_version() -> str:
    """Part of the cache key: a different compiler is a different build."""
    try:
        out = subprocess.run([str(nvcc_path()), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise AstraError(f"cannot run {nvcc_path()} --version: {e}") from None
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


def host_compiler() -> str:
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        raise AstraError(f"host C++ compiler {cxx!r} not found: install g++ or set CXX")
    return cxx


def ninja_path() -> str:
    """On PATH, else beside this Python (pip's ninja in a venv that was not activated, as a server often runs)."""
    beside = Path(sys.executable).parent / "ninja"
    ninja = shutil.which("ninja") or (str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None)
    if ninja is None:
        raise AstraError("ninja not found: `pip install ninja` (the CUDA build runs through a generated build.ninja)")
    return ninja


@functools.cache
def tvm_ffi_paths() -> tuple[Path, Path]:
    """(include dir, lib dir) of apache-tvm-ffi, found without importing it (importing loads its library)."""
    spec = importlib.util.find_spec("tvm_ffi")
    if spec is None or not spec.submodule_search_locations:
        raise AstraError("apache-tvm-ffi is not installed: `pip install apache-tvm-ffi==0.1.11`")
    root = Path(list(spec.submodule_search_locations)[0])
    include, lib = root / "include", root / "lib"
    if not (include / "tvm" / "ffi").is_dir() or not (lib / "libtvm_ffi.so").exists():
        raise AstraError(f"apache-tvm-ffi at {root} lacks include/tvm/ffi or lib/libtvm_ffi.so: reinstall it")
    return include, lib


def tvm_ffi_version() -> str:
    try:
        from importlib.metadata import version

        return version("apache-tvm-ffi")
    except Exception:
        return "unknown"
