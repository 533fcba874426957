"""The shipped test vehicle (triton-silu-and-mul-v1) copied to play a regular patch in plugin tests."""

from __future__ import annotations

import shutil
from pathlib import Path

from astra_sglang.contract.patch import load_patch_manifest, write_patch_manifest


def copy_as_regular(src: Path, dest: Path) -> Path:
    """A copy of ``src`` that ``ASTRA_SGLANG_PATCHES=all`` enables: the shipped vehicle is retired from 'all'
    (it is slower than SGLang's kernel), but the tests of what 'all' does need a patch that it selects."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__"))
    m = load_patch_manifest(dest)
    write_patch_manifest(dest, m.model_copy(update={"in_all": True}))
    return dest
