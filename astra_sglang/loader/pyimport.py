"""Import a Python file by path under a name nobody else uses.

Candidates and extracted kernels share file names (``merge_state.py``) and module-level state; a unique module
name per (path, content) keeps two candidates in one process from shadowing each other, and keeps the file
from being imported as, or shadowing, the SGLang module it was copied from.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from astra_sglang.errors import AstraError


def import_path(source: Path, prefix: str = "astra_src") -> ModuleType:
    source = Path(source).resolve()
    if not source.is_file():
        raise AstraError(f"{source} does not exist")
    digest = hashlib.sha256(str(source).encode() + b"\0" + source.read_bytes()).hexdigest()[:16]
    stem = re.sub(r"\W", "_", source.stem)
    name = f"{prefix}_{stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, source)
    if spec is None or spec.loader is None:
        raise AstraError(f"cannot import {source}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # @triton.jit and dataclasses look the module up while it executes
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(name, None)
        raise AstraError(f"importing {source} failed: {type(e).__name__}: {e}") from e
    return module


def load_function(source: Path, name: str, prefix: str = "astra_src") -> Callable[..., Any]:
    module = import_path(source, prefix)
    fn: Callable[..., Any] | None = getattr(module, name, None)
    if not callable(fn):
        raise AstraError(f"{source} defines no function {name!r}")
    return fn


def load_triton_wrapper(source: Path, wrapper: str) -> Callable[..., Any]:
    """The Triton launch wrapper of an extracted op or a candidate; no sglang import is needed or made."""
    return load_function(source, wrapper, prefix="astra_triton")
