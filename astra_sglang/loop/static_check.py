"""Cheap checks of a candidate's form before anything builds it: a reply that is not code fails here.

Catches what a model most often gets wrong without spending a build: prose or a diff instead of a file, a
renamed or re-signed entry point, and whatever ``harness.screen`` (the same rules the harness applies) rejects.
The harness remains the judge of everything else.
"""

from __future__ import annotations

import ast
from pathlib import Path

from astra_sglang import pyast
from astra_sglang.contract.op import CudaJitRecipe, Manifest, TritonRecipe
from astra_sglang.errors import AstraError
from astra_sglang.harness import screen_source

CUDA_SUFFIXES = (".cuh", ".cu", ".h", ".hpp", ".hh", ".cpp", ".cc", ".cxx")


def candidate_suffix(manifest: Manifest) -> str:
    return ".py" if isinstance(manifest.recipe, TritonRecipe) else Path(manifest.recipe.sources[0]).suffix or ".cuh"


def seed_name(manifest: Manifest) -> str:
    """The run folder's copy of a seeded run's round-1 kernel (``optimize --seed-kernel``)."""
    return "seed" + candidate_suffix(manifest)


def require_candidate_file(candidate: Path, manifest: Manifest) -> None:
    """A CUDA file handed to a Triton op would otherwise fail as a Python SyntaxError, i.e. as a wrong kernel."""
    suffix = Path(candidate).suffix.lower()
    triton = isinstance(manifest.recipe, TritonRecipe)
    if (suffix != ".py") if triton else (suffix not in CUDA_SUFFIXES):
        kind = "a .py candidate (Triton)" if triton else f"a {candidate_suffix(manifest)} candidate (CUDA)"
        raise AstraError(f"this op ({manifest.short_name}) takes {kind}; got {Path(candidate).name}")


def original_source_path(op_dir: Path, manifest: Manifest) -> Path:
    r = manifest.recipe
    return Path(op_dir) / (r.source if isinstance(r, TritonRecipe) else r.sources[0])


def _params(fn: ast.FunctionDef) -> list[str]:
    a = fn.args
    return [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]


def _wrapper(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node  # type: ignore[return-value]
    return None


def check_source(source: str, op_dir: Path, manifest: Manifest) -> str | None:
    """None if the form is right, else the problem in words the coding agent can act on."""
    if not source.strip():
        return "the source is empty"
    r = manifest.recipe
    if isinstance(r, TritonRecipe):
        try:
            tree = pyast.parse(source)
        except SyntaxError as e:
            line = (e.text or "").rstrip()
            return f"SyntaxError: {e.msg} (line {e.lineno}){': ' + line if line else ''}"
        fn = _wrapper(tree, r.wrapper)
        if fn is None:
            return f"the file defines no top-level function {r.wrapper!r} (the entry point must keep its name)"
        try:
            orig = _wrapper(pyast.parse(original_source_path(op_dir, manifest).read_text()), r.wrapper)
        except (OSError, SyntaxError):
            orig = None
        if orig is not None and _params(orig) != _params(fn):
            return f"{r.wrapper} must keep its parameters {_params(orig)}, got {_params(fn)}"
        return next((str(f) for f in screen_source(source, op_dir, manifest)), None)
    if isinstance(r, CudaJitRecipe):
        missing = [e.symbol for e in r.exports if e.symbol.split("<")[0].split("::")[-1] not in source]
        if missing:
            return f"the source does not define the exported entry point(s) {missing}"
        if source.count("{") != source.count("}"):
            return "unbalanced braces: this does not look like a complete source file"
        return next((str(f) for f in screen_source(source, op_dir, manifest)), None)
    return None
