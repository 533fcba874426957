"""Reading SGLang's Python kernel modules without running them: where a JIT module's ``load_jit`` points,
which ``@triton.jit`` kernels a file defines, and whether a file needs SGLang to import.

Static (AST) scanning is used for discovery because it is cheap for all ~500 registered ops and never
triggers a build; the exact build recipe of an extracted op is captured by running SGLang's own
module-builder instead (see ``recipe.py``).
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path


@dataclass
class ModuleScan:
    path: Path
    cuda_files: list[str] = field(default_factory=list)  # literal cuda_files of load_jit calls
    dynamic_load_jit: bool = False  # a load_jit call whose cuda_files is not a literal list
    triton_kernels: list[str] = field(default_factory=list)
    functions: set[str] = field(default_factory=set)
    sglang_imports: list[str] = field(default_factory=list)  # module-level imports of sglang.*
    error: str | None = None


def module_file(module: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def _is_triton_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    text = ast.unparse(target)
    return text in {"triton.jit", "tl.jit", "jit", "triton.autotune", "triton.heuristics"} or text.endswith(".jit")


def _literal_strings(node: ast.expr) -> list[str] | None:
    if isinstance(node, (ast.List, ast.Tuple)) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
    ):
        return [e.value for e in node.elts]  # type: ignore[attr-defined]
    return None


@cache
def scan_module(module: str) -> ModuleScan | None:
    path = module_file(module)
    if path is None:
        return None
    result = ModuleScan(path=path)
    try:
        tree = parsed(path)
    except (SyntaxError, UnicodeDecodeError) as e:
        result.error = f"cannot parse {path.name}: {e}"
        return result
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.module.startswith("sglang"):
            result.sglang_imports.append(stmt.module)
        elif isinstance(stmt, ast.Import):
            result.sglang_imports += [a.name for a in stmt.names if a.name.startswith("sglang")]
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            result.functions.add(node.name)
            if any(_is_triton_decorator(d) for d in node.decorator_list) and node.name not in result.triton_kernels:
                result.triton_kernels.append(node.name)
        elif isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] == "load_jit":
            files = next((k.value for k in node.keywords if k.arg == "cuda_files"), None)
            literal = _literal_strings(files) if files is not None else None
            if literal is None:
                result.dynamic_load_jit = True
            else:
                result.cuda_files += [f for f in literal if f not in result.cuda_files]
    return result


def imported_modules_of(module: str, qualname: str) -> tuple[str, ...]:
    """Modules that the function ``qualname`` of ``module`` imports inside its body (``forward_jit`` style)."""
    return _function_imports(module).get(qualname.split(".")[-1], ())


@cache
def _function_imports(module: str) -> dict[str, tuple[str, ...]]:
    """Function name -> the modules its body imports, for every function of ``module`` at once: discovery asks
    per registered op, ~430 times over a few dozen files, and parsing the file for each ask was most of the
    16 s `extract --list` took (2026-12-05)."""
    path = module_file(module)
    if path is None:
        return {}
    try:
        tree = parsed(path)
    except (SyntaxError, UnicodeDecodeError):
        return {}
    found: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        names = found.setdefault(node.name, [])
        for inner in ast.walk(node):
            if isinstance(inner, ast.ImportFrom) and inner.module:
                base = inner.module
                if inner.level:  # relative import inside a package module
                    pkg = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
                    for _ in range(inner.level - 1):
                        pkg = pkg.rsplit(".", 1)[0]
                    base = f"{pkg}.{inner.module}"
                names.append(base)
                names += [f"{base}.{a.name}" for a in inner.names]
    return {name: tuple(dict.fromkeys(mods)) for name, mods in found.items()}


@cache
def parsed(path: Path) -> ast.Module:
    """One parse per file for every scan of it (the tree is shared: callers read it and never change it)."""
    return ast.parse(path.read_text(), filename=str(path))
