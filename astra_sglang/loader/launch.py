"""Turn an extracted op (or a candidate for it) into ``launch(args) -> Any`` and its torch reference.

The recipe's ``call`` list is the contract for how the entry point is called: each item is a signature name
(looked up in ``args``), ``keyword=item``, or a Python literal (``"silu"``, ``False``, ``1e-6``).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Callable, Optional

from astra_sglang.contract.op import CudaJitRecipe, Manifest, Recipe, TritonRecipe
from astra_sglang.errors import AstraError
from astra_sglang.loader.pyimport import load_function, load_triton_wrapper

Launcher = Callable[[dict[str, Any]], Any]
_MISSING = object()


def _item(item: str, args: dict[str, Any]) -> Any:
    if item in args:
        return args[item]
    try:
        return ast.literal_eval(item)
    except (ValueError, SyntaxError):
        raise AstraError(f"call item {item!r} is neither an argument name nor a Python literal "
                         f"(arguments: {sorted(args)})") from None


def resolve_call(call: list[str], args: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    positional: list[Any] = []
    keywords: dict[str, Any] = {}
    for item in call:
        key, eq, rest = item.partition("=")
        if eq and key.isidentifier() and key not in args and rest:
            keywords[key] = _item(rest, args)
        else:
            if keywords:
                raise AstraError(f"call list {call}: positional item {item!r} after a keyword")
            positional.append(_item(item, args))
    return positional, keywords


def make_launcher(
    op_dir: Path,
    manifest: Manifest,
    dtype: str,
    *,
    kernel_source: Optional[Path] = None,
    cache_dir: Optional[Path] = None,
    recipe: Optional[Recipe] = None,
    arch: str = "sm_90a",
) -> Launcher:
    """Build/import the op (or the candidate in ``kernel_source``) and return a function of the args dict."""
    r = recipe if recipe is not None else manifest.recipe
    if isinstance(r, CudaJitRecipe):
        from astra_sglang.loader.cuda_build import build_cuda_module

        built = build_cuda_module(op_dir, manifest, dtype, kernel_source=kernel_source, cache_dir=cache_dir,
                                  arch=arch, recipe=r)
        fn = getattr(built.module, r.entry)
    elif isinstance(r, TritonRecipe):
        source = Path(kernel_source) if kernel_source is not None else Path(op_dir) / r.source
        fn = load_triton_wrapper(source, r.wrapper)
    else:  # pragma: no cover - the Recipe union has two kinds
        raise AstraError(f"unsupported recipe kind {getattr(r, 'kind', r)!r}")
    call = list(r.call)

    def launch(args: dict[str, Any]) -> Any:
        positional, keywords = resolve_call(call, args)
        return fn(*positional, **keywords)

    launch.__name__ = f"launch_{manifest.short_name}"
    return launch


def load_reference(op_dir: Path, manifest: Manifest) -> Callable[..., dict[str, Any]]:
    """``reference(**args) -> {name: tensor}`` for every output and in-place argument."""
    path = Path(op_dir) / manifest.reference.path
    if not path.is_file():
        raise AstraError(f"reference {path} is missing: run `astra-sglang extract` to regenerate the folder")
    return load_function(path, manifest.reference.function, prefix="astra_reference")
