"""Turn an extracted op (or a candidate or patch for it) into ``launch(args) -> Any`` and its torch reference.

The op manifest is the one description of how a kernel is called: its recipe names the entry point (the CUDA
export, or the Triton wrapper) and the ``call`` list, each item a signature name (looked up in ``args``),
``keyword=item``, or a Python literal (``"silu"``, ``False``, ``1e-6``). A call list is compiled once, so the
hot path (the plugin inside SGLang's server) only indexes a dict.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from astra_sglang.contract.op import (
    CudaJitRecipe,
    Manifest,
    Recipe,
    TorchRecipe,
    TritonRecipe,
    entry_and_call,
    signature_names,
)
from astra_sglang.errors import AstraError
from astra_sglang.loader.pyimport import load_function, load_triton_wrapper

Launcher = Callable[[dict[str, Any]], Any]


@dataclass(frozen=True)
class CompiledCall:
    """A call list with every item resolved ahead of time: (is an argument name, name or literal value)."""

    positional: tuple[tuple[bool, Any], ...]
    keywords: tuple[tuple[str, bool, Any], ...]

    def names(self) -> set[str]:
        """The argument names the call passes (the rest of the signature's outputs are returned)."""
        return {v for is_name, v in self.positional if is_name} | {v for _, is_name, v in self.keywords if is_name}

    def __call__(self, args: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        return ([args[v] if is_name else v for is_name, v in self.positional],
                {k: (args[v] if is_name else v) for k, is_name, v in self.keywords})


def compile_call(call: list[str], names: set[str] | list[str]) -> CompiledCall:
    """Parse a recipe-style call list against the argument names it may use; one AstraError for a bad item."""
    known = set(names)

    def item(text: str) -> tuple[bool, Any]:
        if text in known:
            return True, text
        try:
            return False, ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise AstraError(f"call item {text!r} is neither an argument name nor a Python literal "
                             f"(arguments: {sorted(known)})") from None

    pos: list[tuple[bool, Any]] = []
    kw: list[tuple[str, bool, Any]] = []
    for it in call:
        key, eq, rest = it.partition("=")
        if eq and key.isidentifier() and rest:  # name=value, name=arg (page_size=page_size) alike
            kw.append((key, *item(rest)))
        else:
            if kw:
                raise AstraError(f"call list {call}: positional item {it!r} after a keyword")
            pos.append(item(it))
    return CompiledCall(tuple(pos), tuple(kw))


def make_launcher(
    op_dir: Path,
    manifest: Manifest,
    dtype: str,
    *,
    kernel_source: Path | None = None,
    cache_dir: Path | None = None,
    recipe: Recipe | TorchRecipe | None = None,
    arch: str = "sm_90a",
    kind: str | None = None,
) -> Launcher:
    """Build/import the op (or the kernel in ``kernel_source``, of ``kind``) as a function of the args dict.

    ``recipe`` builds a baseline's recipe from the same folder instead of the op's own.
    """
    r = recipe if recipe is not None else manifest.recipe
    kind = kind or r.kind
    if isinstance(r, TorchRecipe):  # a baseline that is SGLang's eager torch code: imported, called as is
        entry, call = r.function, list(r.call)
    elif recipe is not None:
        entry, call = (r.entry if isinstance(r, CudaJitRecipe) else r.wrapper), list(r.call)
    else:
        entry, call = entry_and_call(manifest, kind)
    if isinstance(r, TorchRecipe):
        fn = load_function(Path(op_dir) / r.source, entry, prefix="astra_baseline")
    elif kind == "cuda_jit":
        from astra_sglang.loader.cuda_build import CudaBuildSpec

        assert isinstance(r, CudaJitRecipe)
        built = CudaBuildSpec.from_recipe(op_dir, manifest, dtype, recipe=r, kernel_source=kernel_source, arch=arch,
                                          cache_dir=cache_dir).build_and_load()
        fn = getattr(built.module, entry)
    else:
        if kernel_source is None and not isinstance(r, TritonRecipe):
            raise AstraError(f"{manifest.short_name}: a Triton kernel for a {r.kind} op needs its source")
        source = Path(kernel_source) if kernel_source is not None else Path(op_dir) / r.source  # type: ignore[union-attr]
        closure = r.closure if isinstance(r, TritonRecipe) else None
        fn = load_triton_wrapper(source, entry, closure=closure, op_dir=Path(op_dir))
        if isinstance(r, TritonRecipe) and r.adapter:
            fn = _adapted(Path(op_dir), r.adapter, fn)
    resolve = compile_call(call, signature_names(manifest))

    def launch(args: dict[str, Any]) -> Any:
        positional, keywords = resolve(args)
        return fn(*positional, **keywords)

    launch.__name__ = f"launch_{manifest.short_name}"
    return launch


def _adapted(op_dir: Path, adapter: str, wrapper: Callable[..., Any]) -> Callable[..., Any]:
    """The wrapper behind the op folder's adapter (``file.py:function``), which builds what a call list cannot."""
    path, _, name = adapter.partition(":")
    call = load_function(op_dir / path, name, prefix="astra_adapter")
    return functools.partial(call, wrapper)


def load_reference(op_dir: Path, manifest: Manifest) -> Callable[..., dict[str, Any]]:
    """``reference(**args) -> {name: tensor}`` for every output and in-place argument."""
    path = Path(op_dir) / manifest.reference.path
    if not path.is_file():
        raise AstraError(f"reference {path} is missing: run `astra-sglang extract` to regenerate the folder")
    return load_function(path, manifest.reference.function, prefix="astra_reference")


InputsFn = Callable[[dict[str, int], str, Any, str], dict[str, Any]]
ScalarsFn = Callable[[dict[str, int], str], dict[str, Any]]


def load_inputs(op_dir: Path, manifest: Manifest) -> tuple[InputsFn | None, ScalarsFn | None]:
    """The op's structured-input generator and shape-derived scalars, or (None, None) when it has none."""
    spec = manifest.inputs
    if spec is None:
        return None, None
    path = Path(op_dir) / spec.path
    if not path.is_file():
        raise AstraError(f"inputs {path} is missing: run `astra-sglang extract` to regenerate the folder")
    make = load_function(path, spec.function, prefix="astra_inputs")
    scalars = load_function(path, spec.scalars_function, prefix="astra_inputs") if spec.scalars_function else None
    return make, scalars
