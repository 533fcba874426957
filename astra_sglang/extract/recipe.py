"""Capturing SGLang's exact JIT build request for sm_90 without building anything.

The module-builder function (e.g. ``activation_module``) is run with ``load_jit`` replaced by a recorder
that raises once it has the arguments; ``is_arch_support_pdl`` and ``get_activation_cuda_cflags`` are pinned
to their sm_90 CUDA answers, and the default target flags come from SGLang's own
``get_default_target_flags`` for compute capability 9.0. So the template arguments, exports and flags are
what SGLang itself would compile on an H100/H200, read from the installed code rather than restated.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from astra_sglang.errors import AstraError


def _sm90_arch() -> Any:
    from sglang.kernels.jit.utils.arch import make_jit_cuda_arch

    return make_jit_cuda_arch(9, 0)


# get_jit_cuda_arch answers 0.0 on a host without a GPU, and builders branch on it (per_token_quant_fp8 adds
# --use_fast_math and names its module 'fast_math' only on 9.0): pinned like the others.
_SM90_OVERRIDES: dict[str, Any] = {
    "is_arch_support_pdl": lambda: True,
    "get_activation_cuda_cflags": lambda: ["--use_fast_math"],
    "get_jit_cuda_arch": _sm90_arch,
}


@dataclass
class JitRequest:
    module_args: tuple[str, ...]
    cuda_files: list[str]
    cuda_wrappers: list[tuple[str, str]]
    extra_cuda_cflags: list[str]
    extra_ldflags: list[str]
    extra_include_paths: list[str]
    extra_dependencies: list[str]
    header_only: bool


class _Captured(Exception):
    def __init__(self, request: JitRequest) -> None:
        super().__init__("captured")
        self.request = request


def _recorder(*args: Any, **kwargs: Any) -> Any:
    raise _Captured(
        JitRequest(
            module_args=tuple(str(a) for a in args),
            cuda_files=list(kwargs.get("cuda_files") or []),
            cuda_wrappers=[tuple(w) for w in kwargs.get("cuda_wrappers") or []],  # type: ignore[misc]
            extra_cuda_cflags=list(kwargs.get("extra_cuda_cflags") or []),
            extra_ldflags=list(kwargs.get("extra_ldflags") or []),
            extra_include_paths=list(kwargs.get("extra_include_paths") or []),
            extra_dependencies=list(kwargs.get("extra_dependencies") or []),
            header_only=bool(kwargs.get("header_only", True)),
        )
    )


def resolve_target(target: str) -> Any:
    """'pkg.mod:Obj.attr' -> the object (imports the module)."""
    module, _, qual = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qual.split(".") if qual else []:
        obj = getattr(obj, part)
    return obj


def _convert(arg: Any) -> Any:
    if isinstance(arg, str) and arg.startswith("torch."):
        import torch

        return getattr(torch, arg.split(".", 1)[1])
    return arg


def capture_jit_request(builder: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> JitRequest:
    """Run SGLang's module builder up to its ``load_jit`` call and return what it asked for (sm_90)."""
    fn = resolve_target(builder)
    raw = getattr(fn, "__wrapped__", fn)  # bypass cache_once so nothing is memoized
    env = raw.__globals__
    saved = {name: env[name] for name in ["load_jit", *_SM90_OVERRIDES] if name in env}
    if "load_jit" not in saved:
        raise AstraError(f"{builder} does not call load_jit from its module; cannot capture its build recipe")
    env["load_jit"] = _recorder
    for name, value in _SM90_OVERRIDES.items():
        if name in env:
            env[name] = value
    try:
        raw(*[_convert(a) for a in args], **kwargs)
    except _Captured as c:
        return c.request
    except Exception as e:
        raise AstraError(f"SGLang's builder {builder} failed before load_jit ({type(e).__name__}: {e})") from None
    finally:
        env.update(saved)
    raise AstraError(f"SGLang's builder {builder} returned without calling load_jit")


def sm90_cuda_cflags(extra: list[str]) -> list[str]:
    """``BuildSpec.cuda_cflags`` for sm_90: SGLang's default target flags + the builder's extras.

    The toolchain adds ``-Xcompiler -fPIC``, ``-gencode=arch=compute_90a,code=sm_90a`` and the -I flags itself
    (see the manifest notes); those are not part of the recipe's flags, as in SGLang's BuildSpec.
    """
    from sglang.kernels.jit.utils.arch import (
        get_default_target_flags,
        make_jit_cuda_arch,
    )

    return list(get_default_target_flags(make_jit_cuda_arch(9, 0))) + list(extra)


def sm90_ldflags(extra: list[str]) -> list[str]:
    from sglang.kernels.jit.utils.compile.paths import DEFAULT_LDFLAGS

    return list(DEFAULT_LDFLAGS) + list(extra)
