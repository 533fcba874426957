"""Copying a kernel source with exactly the headers it reaches, each pinned by SHA-256.

``#include "x"`` resolves against the including file's folder first, then the include dirs; ``#include <x>``
against the include dirs only (SGLang's JIT sources use ``<sgl_kernel/...>`` through ``-I include``). A name
found in none of them is a system/CUDA/tvm-ffi header: recorded, not copied. Includes inside comments are
ignored; conditional includes are followed whatever the condition (over-approximation keeps the folder
self-contained).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from astra_sglang.errors import AstraError

_INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.MULTILINE)
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
_LINE_COMMENT = re.compile(r"//[^\n]*")


@dataclass
class Closure:
    files: list[Path] = field(default_factory=list)  # absolute, the roots first, then in discovery order
    external: list[str] = field(default_factory=list)  # include names resolved outside the roots



def includes_of(text: str) -> list[tuple[str, str]]:
    stripped = _LINE_COMMENT.sub("", _BLOCK_COMMENT.sub("", text))
    return [(m.group(1), m.group(2)) for m in _INCLUDE.finditer(stripped)]


def include_closure(roots: list[Path], include_dirs: list[Path], *, within: list[Path]) -> Closure:
    """Every file transitively included by ``roots`` that resolves under one of ``within``."""
    within = [w.resolve() for w in within]
    result = Closure()
    seen: set[Path] = set()
    stack = [r.resolve() for r in roots]
    while stack:
        path = stack.pop(0)
        if path in seen:
            continue
        seen.add(path)
        result.files.append(path)
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            raise AstraError(f"cannot parse {path}: not UTF-8 text") from None
        for kind, name in includes_of(text):
            candidates = ([path.parent / name] if kind == '"' else []) + [d / name for d in include_dirs]
            found = next((c.resolve() for c in candidates if c.is_file()), None)
            if found is not None and any(found.is_relative_to(w) for w in within):
                stack.append(found)
            elif name not in result.external:
                result.external.append(name)
    return result
