"""Turn a patch folder into ``kernel(args) -> Any`` with the stand-alone loader (no SGLang import).

Triton patches are imported by path; cuda_jit patches are built like the extracted op (its recipe, headers
and include dirs) with the patch's source in place of ``recipe.sources[0]``, one module per dtype, through
the loader's cache (keyed by the hash of every input, flags and arch), so the N processes of one server
build once.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any, Callable, Optional

from astra_sglang.contract.op import MANIFEST_NAME
from astra_sglang.contract.patch import PatchManifest
from astra_sglang.data_paths import bundled_extracted, user_cache
from astra_sglang.errors import AstraError
from astra_sglang.extract.restore import materialize
from astra_sglang.patches.adapters.base import Args, OpAdapter

ENV_EXTRACTED = "ASTRA_SGLANG_EXTRACTED_DIR"
Kernel = Callable[[Args], Any]


def compile_call(call: list[str], names: set[str]) -> Callable[[Args], tuple[list[Any], dict[str, Any]]]:
    """Pre-resolve a recipe-style call list once, so the hot path only indexes a dict.

    Same grammar as ``astra_sglang.loader.resolve_call`` (names, ``key=item``, Python literals), evaluated
    ahead of time because literal parsing per call would cost microseconds on every served call.
    """
    pos: list[tuple[bool, Any]] = []
    kw: list[tuple[str, bool, Any]] = []

    def item(text: str) -> tuple[bool, Any]:
        if text in names:
            return True, text
        try:
            return False, ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise AstraError(f"call item {text!r} is neither an argument name ({sorted(names)}) nor a literal") from None

    for it in call:
        key, eq, rest = it.partition("=")
        if eq and key.isidentifier() and key not in names and rest:
            kw.append((key, *item(rest)))
        else:
            pos.append(item(it))

    def resolve(a: Args) -> tuple[list[Any], dict[str, Any]]:
        return ([a[v] if is_name else v for is_name, v in pos],
                {k: (a[v] if is_name else v) for k, is_name, v in kw})

    return resolve


def extracted_op_dir(m: PatchManifest) -> Path:
    """The op's extracted folder, completed from the installed SGLang when only its committed part is here."""
    rel = m.kernel.op_dir or f"extracted/{m.op}"
    base = os.environ.get(ENV_EXTRACTED)
    folder = Path(base).expanduser() / Path(rel).name if base else bundled_extracted() / Path(rel).name
    if not (folder / MANIFEST_NAME).is_file():
        return folder  # the caller's load_manifest reports it
    return materialize(folder, user_cache())


def load_kernel(patch_dir: Path, m: PatchManifest, adapter: OpAdapter, *, dtypes: list[str],
                arch: Optional[str]) -> Kernel:
    src = Path(patch_dir) / m.kernel.source
    if m.kernel.kind == "triton":
        from astra_sglang.loader.pyimport import load_triton_wrapper

        fn = load_triton_wrapper(src, m.kernel.entry)
        resolve = compile_call(m.kernel.call, set(adapter.tensor_names) | set(adapter.scalar_names))

        def triton_kernel(a: Args) -> Any:
            p, k = resolve(a)
            return fn(*p, **k)

        return triton_kernel
    return _load_cuda(src, m, adapter, dtypes=dtypes, arch=arch or "sm_90a")


def _load_cuda(src: Path, m: PatchManifest, adapter: OpAdapter, *, dtypes: list[str], arch: str) -> Kernel:
    return op_kernel(extracted_op_dir(m), adapter, dtypes=dtypes, arch=arch, kernel_source=src,
                     entry=m.kernel.entry or None, call=m.kernel.call or None, require="cuda_jit")


def op_kernel(op_dir: Path, adapter: OpAdapter, *, dtypes: list[str], arch: Optional[str] = "sm_90a",
              kernel_source: Optional[Path] = None, entry: Optional[str] = None, call: Optional[list[str]] = None,
              require: Optional[str] = None) -> Kernel:
    """The extracted op (or a source replacing its kernel) as ``kernel(canonical args)``.

    Canonical adapter names map by position onto the extracted signature's tensors and scalars; a mismatch
    is refused rather than guessed. Without ``kernel_source`` this is SGLang's original as extracted, which is
    what the GPU check compares patches with where SGLang itself is not installed.
    """
    import torch

    from astra_sglang.contract.op import CudaJitRecipe, load_manifest

    try:
        op_manifest = load_manifest(op_dir)
    except Exception as e:
        raise AstraError(f"extracted op folder {op_dir} unusable ({e}); run `astra-sglang extract`") from None
    recipe = op_manifest.recipe
    if require and recipe.kind != require:
        raise AstraError(f"{op_dir}: op is {recipe.kind}, a {require} patch cannot be built against it")
    sig_tensors = [t.name for t in op_manifest.signature.tensors]
    sig_scalars = [s.name for s in op_manifest.signature.scalars]
    if len(sig_tensors) != len(adapter.tensor_names) or len(sig_scalars) > len(adapter.scalar_names):
        raise AstraError(f"{op_dir}: signature {sig_tensors + sig_scalars} does not match the "
                         f"{adapter.op} adapter's {list(adapter.tensor_names + adapter.scalar_names)}")
    rename = list(zip(adapter.tensor_names, sig_tensors)) + list(zip(adapter.scalar_names, sig_scalars))
    resolve = compile_call(call or recipe.call, set(sig_tensors) | set(sig_scalars))
    fns: dict[Any, Callable[..., Any]] = {}
    if isinstance(recipe, CudaJitRecipe):
        from astra_sglang.loader.cuda_build import build_cuda_module

        for d in dtypes:
            built = build_cuda_module(op_dir, op_manifest, d, kernel_source=kernel_source, arch=arch or "sm_90a")
            fns[getattr(torch, d)] = getattr(built.module, entry or recipe.entry)
    else:
        from astra_sglang.loader.pyimport import load_triton_wrapper

        fn = load_triton_wrapper(Path(kernel_source) if kernel_source else Path(op_dir) / recipe.source,
                                 entry or recipe.wrapper)
        fns = {getattr(torch, d): fn for d in dtypes}
    first = adapter.tensor_names[0]

    def kernel(a: Args) -> Any:
        fn = fns[a[first].dtype]
        p, k = resolve({ext: a[canon] for canon, ext in rename})
        return fn(*p, **k)

    return kernel
