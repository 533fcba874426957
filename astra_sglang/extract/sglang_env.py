"""Importing the installed SGLang on a machine without a GPU, and where its kernel files live.

SGLang's layer modules import torchvision through model configs; the registry build of torchvision does
not load beside a CPU torch, so a stand-in package answers every ``torchvision.*`` import with inert
placeholders (reporting version 0.28.0). It is installed only when the real torchvision cannot be imported,
and only here, so the rest of astra-sglang never has to know about it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from functools import cache
from pathlib import Path
from typing import Any

from astra_sglang.contract.restore import installed_package_root
from astra_sglang.errors import AstraError

_STANDIN_VERSION = "0.28.0"


class _Inert(type):
    """A placeholder class whose attributes are placeholders too (``InterpolationMode.BICUBIC``)."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert(name, (), {})

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("torchvision is a stand-in in this process (astra-sglang on CPU)")


class _StandInModule(types.ModuleType):
    __version__: str

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert(name, (), {})


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StandInModule(spec.name)
        module.__path__ = []  # a package: submodule imports come back here
        module.__version__ = _STANDIN_VERSION
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def install_cpu_shims() -> None:
    """Let ``sglang.srt.layers.*`` import where torchvision cannot (idempotent)."""
    if any(isinstance(f, _StandInFinder) for f in sys.meta_path):
        return
    if "torchvision" in sys.modules:
        return
    try:
        importlib.import_module("torchvision")
        return
    except Exception:
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
    sys.meta_path.insert(0, _StandInFinder())


def require_sglang() -> types.ModuleType:
    """Import ``sglang.kernels.ops`` (which fills the registry) or fail with one actionable line."""
    if importlib.util.find_spec("sglang") is None:
        raise AstraError("SGLang is not installed in this Python; install it with `pip install 'astra-sglang[sglang]'`")
    install_cpu_shims()
    try:
        return importlib.import_module("sglang.kernels.ops")
    except Exception as e:  # an install too old/new to have the kernel registry
        raise AstraError(
            f"cannot import sglang.kernels.ops from the installed SGLang ({type(e).__name__}: {e})") from None


def import_optional(module: str) -> types.ModuleType | None:
    """Import a SGLang module for call-site scanning; a module that cannot import on this host is skipped."""
    import warnings

    install_cpu_shims()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SGLang warns about missing CUDA on import: noise for the user
            return importlib.import_module(module)
    except Exception:
        return None


@cache
def sglang_root() -> Path:
    root = installed_package_root("sglang")
    if root is None:
        raise AstraError("SGLang is not installed in this Python; install it with `pip install 'astra-sglang[sglang]'`")
    return root


def jit_dir() -> Path:
    return sglang_root() / "kernels" / "jit"


def sglang_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except PackageNotFoundError:
        return getattr(importlib.import_module("sglang"), "__version__", "unknown")


def flashinfer_root() -> Path | None:
    return installed_package_root("flashinfer")


def flashinfer_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("flashinfer-python")
    except PackageNotFoundError:
        return None
