"""Import a Python file by path under a name nobody else uses.

Candidates and extracted kernels share file names (``merge_state.py``) and module-level state; a unique module
name per (path, content) keeps two candidates in one process from shadowing each other, and keeps the file
from being imported as, or shadowing, the SGLang module it was copied from.

A Triton source that imports SGLang runs with its vendored closure (``PyClosure`` in the recipe) under a private
package name: a meta-path finder answers only that package, each module's ``sglang.`` imports are rewritten to
it as the module loads, and a pruned module runs only its kept statements. ``sglang`` itself is never put in
``sys.modules``, so the kernel cannot reach an installed SGLang and runs where none is installed.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from astra_sglang.contract.op import PyClosure, PyModule
from astra_sglang.errors import AstraError


def import_path(source: Path, prefix: str = "astra_src") -> ModuleType:
    source = Path(source).resolve()
    if not source.is_file():
        raise AstraError(f"{source} does not exist")
    digest = hashlib.sha256(str(source).encode() + b"\0" + source.read_bytes()).hexdigest()[:16]
    stem = re.sub(r"\W", "_", source.stem)
    name = f"{prefix}_{stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, source)
    if spec is None or spec.loader is None:
        raise AstraError(f"cannot import {source}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # @triton.jit and dataclasses look the module up while it executes
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(name, None)
        raise AstraError(f"importing {source} failed: {type(e).__name__}: {e}") from e
    return module


def load_function(source: Path, name: str, prefix: str = "astra_src") -> Callable[..., Any]:
    module = import_path(source, prefix)
    fn: Callable[..., Any] | None = getattr(module, name, None)
    if not callable(fn):
        raise AstraError(f"{source} defines no function {name!r}")
    return fn


def load_triton_wrapper(source: Path, wrapper: str, closure: PyClosure | None = None,
                        op_dir: Path | None = None) -> Callable[..., Any]:
    """The Triton launch wrapper of an extracted op or a candidate; no sglang import is needed or made. With a
    closure, ``source`` (the op's source or a candidate replacing it) runs among the op folder's vendored modules."""
    if closure is None:
        from astra_sglang.loader.msgspec_standin import install_if_missing

        install_if_missing()  # SGLang's sources declare msgspec Structs; the GPU image has no msgspec
        return load_function(source, wrapper, prefix="astra_triton")
    module = import_closure(Path(op_dir or "."), closure, root_source=source)
    fn: Callable[..., Any] | None = getattr(module, wrapper, None)
    if not callable(fn):
        raise AstraError(f"{source} defines no function {wrapper!r}")
    return fn


_SGLANG = "sglang"


def _bound(alias: ast.alias, from_import: bool) -> str:
    return alias.asname or (alias.name if from_import else alias.name.split(".")[0])


class _PrivateImports(ast.NodeTransformer):
    """``sglang.x`` imports -> ``<package>.x``; a bare (unaliased) import of ``sglang.x`` also binds the local name
    ``sglang`` (in that module only, never in sys.modules)."""

    def __init__(self, package: str) -> None:
        self.package = package

    def _private(self, name: str) -> str | None:
        if name == _SGLANG or name.startswith(_SGLANG + "."):
            return self.package + name[len(_SGLANG):]
        return None

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.ImportFrom:
        private = self._private(node.module or "") if not node.level else None
        if private is not None:
            node.module = private
        return node

    def visit_Import(self, node: ast.Import) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for alias in node.names:
            private = self._private(alias.name)
            if private is None:
                out.append(ast.Import(names=[alias]))
            elif alias.asname:
                out.append(ast.Import(names=[ast.alias(private, alias.asname)]))
            else:
                out.append(ast.Import(names=[ast.alias(private)]))
                out.append(ast.Assign(targets=[ast.Name(_SGLANG, ast.Store())], value=ast.Name(self.package, ast.Load())))
        for stmt in out:
            ast.copy_location(stmt, node)
        return out


class LeftOutImport:
    """What a vendored module gets for a name its conditional import could not vendor (a CUDA JIT op under
    ``if _is_cuda:``): the module imports on every device, and only a use of the name fails, saying why."""

    def __init__(self, name: str, why: str) -> None:
        self._name, self._why = name, why

    def _fail(self) -> ImportError:
        return ImportError(f"{self._name} was not vendored with this kernel: {self._why}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise self._fail()

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise self._fail()


_LEFT_OUT = "__astra_left_out__"


class _Placeholders(ast.NodeTransformer):
    """Import statements at the closure's left-out lines -> ``name = __astra_left_out__(name, why)``."""

    def __init__(self, left_out: dict[int, str]) -> None:
        self.left_out = left_out

    def _replace(self, node: ast.Import | ast.ImportFrom) -> Any:
        why = self.left_out.get(node.lineno)
        if why is None:
            return node
        out = [ast.Assign(targets=[ast.Name(_bound(a, isinstance(node, ast.ImportFrom)), ast.Store())],
                          value=ast.Call(ast.Name(_LEFT_OUT, ast.Load()), [ast.Constant(a.name), ast.Constant(why)], []))
               for a in node.names if a.name != "*"]
        return [ast.copy_location(o, node) for o in out] or ast.copy_location(ast.Pass(), node)

    visit_Import = visit_ImportFrom = _replace


def _module_code(path: Path, plan: PyModule, package: str) -> Any:
    tree = ast.parse(path.read_text(), filename=str(path))
    if plan.keep_lines is not None:
        keep = set(plan.keep_lines)
        body = []
        for stmt in tree.body:
            if stmt.lineno not in keep:
                continue
            names = plan.import_subset.get(stmt.lineno)
            if names is not None and isinstance(stmt, (ast.Import, ast.ImportFrom)):
                stmt.names = [a for a in stmt.names if _bound(a, isinstance(stmt, ast.ImportFrom)) in names]
            body.append(stmt)
        tree.body = body
    if plan.left_out:
        tree = _Placeholders(plan.left_out).visit(tree)
    tree = ast.fix_missing_locations(_PrivateImports(package).visit(tree))
    return compile(tree, str(path), "exec")


class _ClosureFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers imports under one private package name from one op folder's vendored modules, nothing else."""

    def __init__(self, package: str, modules: dict[str, tuple[Path, PyModule]]) -> None:
        self.package = package
        self.modules = modules  # name below the package ('srt.environ') -> (file, plan)
        self.packages = {".".join(n.split(".")[:i]) for n in modules for i in range(1, n.count(".") + 1)}

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.package and not fullname.startswith(self.package + "."):
            return None
        rel = fullname[len(self.package) + 1:]
        entry = self.modules.get(rel)
        if entry is not None:
            file = entry[0]
            spec = importlib.machinery.ModuleSpec(fullname, self, origin=str(file),
                                                  is_package=file.name == "__init__.py" or rel in self.packages)
            spec.has_location = True
            return spec
        if not rel or rel in self.packages:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        raise ModuleNotFoundError(f"sglang.{rel} is not in the op folder's vendored closure", name=fullname)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        rel = module.__name__[len(self.package) + 1:]
        entry = self.modules.get(rel)
        if entry is not None:  # else a package folder with no vendored __init__: empty
            module.__dict__[_LEFT_OUT] = LeftOutImport
            exec(_module_code(entry[0], entry[1], self.package), module.__dict__)


def _below_sglang(name: str) -> str:
    if not name.startswith(_SGLANG + "."):
        raise AstraError(f"closure module {name!r} is not an SGLang module")
    return name[len(_SGLANG) + 1:]


def import_closure(op_dir: Path, closure: PyClosure, root_source: Path | None = None) -> ModuleType:
    """The closure's first module (or ``root_source`` in its place), with the other vendored modules importable
    under a private package named for the folder, the closure and the root's content."""
    op_dir = Path(op_dir).resolve()
    if not closure.modules:
        raise AstraError(f"{op_dir}: the Python closure lists no module")
    modules: dict[str, tuple[Path, PyModule]] = {}
    for i, plan in enumerate(closure.modules):
        file = Path(root_source).resolve() if (i == 0 and root_source is not None) else op_dir / plan.path
        if not file.is_file():
            raise AstraError(f"{file} is missing: run `astra-sglang extract --restore`")
        modules[_below_sglang(plan.name)] = (file, plan if i else plan.model_copy(update={"keep_lines": None}))
    root_file = modules[_below_sglang(closure.modules[0].name)][0]
    package = closure.package_name(op_dir, root_file)
    if not any(isinstance(f, _ClosureFinder) and f.package == package for f in sys.meta_path):
        sys.meta_path.insert(0, _ClosureFinder(package, modules))
    name = f"{package}.{_below_sglang(closure.modules[0].name)}"
    from astra_sglang.loader.msgspec_standin import install_if_missing

    install_if_missing()  # the vendored registry (sglang.kernels.spec) declares msgspec Structs
    try:
        return importlib.import_module(name)
    except Exception as e:
        for loaded in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
            del sys.modules[loaded]
        raise AstraError(f"importing {root_file} with its vendored closure failed: {type(e).__name__}: {e}") from e
