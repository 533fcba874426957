"""Turn a patch folder into ``kernel(args) -> Any`` with the stand-alone loader (no SGLang import).

How the kernel is called comes from the op manifest alone (``loader.launch.entry_and_call``): Triton patches
are imported by path; cuda_jit patches are built like the extracted op (its recipe, headers and include dirs)
with the patch's source in place of ``recipe.sources[0]``, one module per dtype built in one parallel batch,
through the loader's cache (keyed by the hash of every input, flags and arch), so the N processes of one
server build once. ``args`` are keyed by the op signature's names, which the adapter's prepared calls use.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from astra_sglang.contract.op import MANIFEST_NAME, Manifest
from astra_sglang.contract.patch import PatchManifest
from astra_sglang.contract.restore import materialize
from astra_sglang.data_paths import user_cache
from astra_sglang.patches.registry import op_folder

Kernel = Callable[[dict[str, Any]], Any]


def extracted_op_dir(m: PatchManifest) -> Path:
    """The op's extracted folder, completed from the installed SGLang when only its committed part is here."""
    folder = op_folder(m.op)
    if not (folder / MANIFEST_NAME).is_file():
        return folder  # the caller's load_manifest reports it
    return materialize(folder, user_cache())


def op_kernel(op_dir: Path, op: Manifest, *, kind: str, dtypes: list[str], arch: str = "sm_90a",
              source: Path | None = None, recipe: Any = None) -> Kernel:
    """The extracted op (or ``source``, a kernel of ``kind`` for it; or a baseline's ``recipe`` from the same folder)
    as ``kernel(args)``, dispatching on dtype.

    Without ``source`` this is SGLang's original as extracted, which is what the GPU check compares patches
    with where SGLang itself is not installed.
    """
    import torch

    from astra_sglang.loader.launch import make_launcher

    if kind == "cuda_jit":  # every dtype at once; the launchers below then load from the cache
        from astra_sglang.loader.cuda_build import CudaBuildSpec, build_batch

        specs = [CudaBuildSpec.from_recipe(op_dir, op, d, recipe=recipe, kernel_source=source, arch=arch)
                 for d in dtypes]
        for outcome in build_batch(specs):
            if isinstance(outcome, Exception):
                raise outcome
    launchers = {getattr(torch, d): make_launcher(op_dir, op, d, kernel_source=source, arch=arch, kind=kind,
                                                  recipe=recipe) for d in dtypes}
    first = op.signature.tensors[0].name

    def kernel(a: dict[str, Any]) -> Any:
        return launchers[a[first].dtype](a)

    return kernel


def load_kernel(patch_dir: Path, m: PatchManifest, op: Manifest, *, dtypes: list[str],
                arch: str | None) -> Kernel:
    """The patch's kernel, built or imported against the op folder completed with SGLang's files: a CUDA one
    includes SGLang's headers, a Triton one may import what SGLang's kernel module imports (decode_attention's
    score_mod and srt utilities), which a wheel never carries (the H200 forward's first call failed on it)."""
    from astra_sglang.patches.retune import kernel_file

    op_dir = extracted_op_dir(m)
    return op_kernel(op_dir, op, kind=m.source.kind, dtypes=dtypes, arch=arch or "sm_90a",
                     source=kernel_file(patch_dir, m, op_dir, op))
