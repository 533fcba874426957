"""The SGLang-internal Python a Triton kernel module needs, transitively, so it runs with no SGLang installed.

Mirrors ``closure.py`` (the CUDA header closure) for Python: imports are read from the AST (``import sglang.x``,
``from sglang.x import y``, relative imports, imports inside functions), and each module reached is copied
verbatim (so ``extract --restore`` refills it by hash). The kernel module itself runs whole; every other module
runs *pruned* to the top-level statements that define the names its importers use, and each ``from .. import``
binds only those names. Pruning is what keeps ``from sglang.srt.utils import is_hip`` from dragging in the
server: ``is_hip`` is four lines of ``srt/utils/common.py`` and needs only ``torch`` and ``functools``.

Imports inside functions, and imports guarded by ``try``, are followed when their closure resolves and left out
(recorded, with why) when it does not: the module still imports, and the left-out import fails only if that path
runs. A module-level import that cannot be resolved is a refusal, one line naming the module, the name and the
line that imports it. Modules holding process-wide serving state are never vendored (``RUNTIME_STATE``).
"""

from __future__ import annotations

import ast
import builtins
import copy
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from astra_sglang.extract.sglang_env import sglang_root
from astra_sglang.extract.source_scan import parsed

# Process-wide serving state: a kernel that needs one of these at import cannot run stand-alone.
RUNTIME_STATE: dict[str, str] = {
    "sglang.srt.distributed": "torch.distributed process-group state",
    "sglang.srt.server_args": "the server's arguments",
    "sglang.srt.layers.dp_attention": "data-parallel attention state",
    "sglang.srt.managers": "the scheduler's state",
    "sglang.srt.model_executor": "the model runner's state",
    "sglang.kernels.jit.utils.compile": "SGLang's CUDA JIT builder (it finds its sources in the installed sglang)",
}

# Imports inside functions are followed in kernel code, and in a runtime helper only within its own package
# (``srt.utils.custom_op`` -> ``srt.utils.common``: ``register_custom_op`` imports ``direct_register_custom_op``
# as it decorates): a helper's other lazy imports (device probes, distributed fallbacks, server config) would drag
# in the server for paths a kernel never takes.
KERNEL_PACKAGE = "sglang.kernels."

_BUILTINS = frozenset(dir(builtins))
_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


@dataclass(frozen=True)
class Site:
    """Where an import is written, and whether a failure there is survivable."""

    module: str
    line: int
    lazy: bool = False  # inside a function: runs only when called
    optional: bool = False  # inside try/except ImportError
    conditional: bool = False  # inside a module-level `if` (device branches): left out -> placeholders

    def where(self) -> str:
        return f"{self.module}:{self.line}"


@dataclass(frozen=True)
class _Import:
    module: str  # absolute module name
    name: str | None  # the imported name (from-import), None for `import x` and for `*`
    binds: str | None  # the name bound in the importing module; None for `*`
    site: Site
    star: bool = False


@dataclass
class _Stmt:
    index: int
    line: int
    node: ast.stmt
    defines: set[str]
    uses: set[str]
    imports: list[_Import]  # every import inside the statement (for a top-level import: its aliases)
    is_import: bool
    touches: set[str]  # names it mutates in place: kept with them


@dataclass
class ModulePlan:
    """How one vendored module runs: whole (``keep_lines`` None) or only the listed top-level statements."""

    name: str
    path: Path
    keep_lines: list[int] | None = None
    import_subset: dict[int, list[str]] = field(default_factory=dict)
    left_out: dict[int, str] = field(default_factory=dict)  # conditional import line -> why it is a placeholder


@dataclass
class PyClosureResult:
    root: str
    modules: dict[str, ModulePlan] = field(default_factory=dict)  # the root first
    lazy_missing: list[str] = field(default_factory=list)
    external: list[str] = field(default_factory=list)  # third-party top-level packages imported at module level
    refusal: str | None = None


def module_path(module: str) -> Path | None:
    """The .py of an SGLang module in the installed package, found without importing anything."""
    parts = module.split(".")
    if parts[0] != "sglang":
        return None
    base = sglang_root().joinpath(*parts[1:])
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return ast.unparse(test) in {"TYPE_CHECKING", "typing.TYPE_CHECKING"}


def _catches_import_error(node: ast.Try) -> bool:
    for handler in node.handlers:
        if handler.type is None:
            return True
        names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(ast.unparse(n).split(".")[-1] in _IMPORT_ERRORS for n in names):
            return True
    return False


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    pkg = module if is_package else module.rsplit(".", 1)[0]
    for _ in range(node.level - 1):
        pkg = pkg.rsplit(".", 1)[0]
    return f"{pkg}.{node.module}" if node.module else pkg


class _Scanner(ast.NodeVisitor):
    """Imports and loaded names of one top-level statement, with the context of each import."""

    def __init__(self, module: str, is_package: bool, skip_annotations: bool) -> None:
        self.module, self.is_package, self.skip_annotations = module, is_package, skip_annotations
        self.imports: list[_Import] = []
        self.uses: set[str] = set()
        self.lazy = self.optional = self.type_checking = self.conditional = False
        self.class_depth = 0

    def _site(self, node: ast.stmt) -> Site:
        return Site(self.module, node.lineno, self.lazy, self.optional, self.conditional and not self.lazy)

    def visit_Import(self, node: ast.Import) -> None:
        if self.type_checking:
            return
        for a in node.names:
            self.imports.append(_Import(a.name, None, a.asname or a.name.split(".")[0], self._site(node)))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if self.type_checking or node.module == "__future__":
            return
        base = _absolute(self.module, self.is_package, node)
        for a in node.names:
            star = a.name == "*"
            self.imports.append(_Import(base, None if star else a.name, None if star else (a.asname or a.name),
                                        self._site(node), star=star))

    def visit_Name(self, node: ast.Name) -> None:
        self.uses.add(node.id)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        for d in getattr(node, "decorator_list", []):
            self.visit(d)
        args = node.args
        for default in [*args.defaults, *[d for d in args.kw_defaults if d is not None]]:
            self.visit(default)
        if not self.skip_annotations and not isinstance(node, ast.Lambda):
            for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
                if a is not None and a.annotation is not None:
                    self.visit(a.annotation)
            if node.returns is not None:
                self.visit(node.returns)
        outer, self.lazy = self.lazy, True
        depth, self.class_depth = self.class_depth, 0
        body = node.body if isinstance(node.body, list) else [node.body]
        for stmt in body:
            self.visit(stmt)
        self.lazy, self.class_depth = outer, depth

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function  # type: ignore[assignment]

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.visit(node.target)
        if node.value is not None:
            self.visit(node.value)
        if not self.skip_annotations or self.class_depth:  # class fields: dataclasses/msgspec read them
            self.visit(node.annotation)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.class_depth += 1
        self.generic_visit(node)
        self.class_depth -= 1

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        outer = self.type_checking
        outer_cond = self.conditional
        self.type_checking = outer or _is_type_checking(node.test)
        self.conditional = True
        for stmt in node.body:
            self.visit(stmt)
        self.type_checking = outer
        for stmt in node.orelse:
            self.visit(stmt)
        self.conditional = outer_cond

    def visit_Try(self, node: ast.Try) -> None:
        outer = self.optional
        self.optional = outer or _catches_import_error(node)
        for stmt in node.body:
            self.visit(stmt)
        self.optional = outer
        for other in [*node.handlers, *node.orelse, *node.finalbody]:
            self.visit(other)


def _targets(node: ast.expr) -> set[str]:
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, (ast.Tuple, ast.List)):
        return set().union(*[_targets(e) for e in node.elts]) if node.elts else set()
    if isinstance(node, ast.Starred):
        return _targets(node.value)
    return set()


def _defines(node: ast.stmt) -> set[str]:
    """Names a top-level statement binds in the module namespace."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.Assign):
        return set().union(*[_targets(t) for t in node.targets])
    if isinstance(node, ast.AnnAssign):  # a bare `x: T` binds nothing (a module __getattr__ may answer x)
        return _targets(node.target) if node.value is not None else set()
    if isinstance(node, ast.AugAssign):
        return _targets(node.target)
    if isinstance(node, ast.Import):
        return {a.asname or a.name.split(".")[0] for a in node.names}
    if isinstance(node, ast.ImportFrom):
        return {a.asname or a.name for a in node.names if a.name != "*"}
    found: set[str] = set()
    if isinstance(node, (ast.For, ast.AsyncFor)):
        found |= _targets(node.target)
    if isinstance(node, (ast.With, ast.AsyncWith)):
        for item in node.items:
            if item.optional_vars is not None:
                found |= _targets(item.optional_vars)
    bodies: list[list[ast.stmt]] = [getattr(node, a, []) for a in ("body", "orelse", "finalbody")]
    bodies += [h.body for h in getattr(node, "handlers", [])]
    for body in bodies:
        for stmt in body:
            found |= _defines(stmt)
    return found


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _touches(node: ast.stmt) -> set[str]:
    """Top-level names a statement mutates without binding (``Cls.CUDA = Cls(...)``, ``REGISTRY.add(x)``)."""
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = [t for t in node.targets if isinstance(t, (ast.Attribute, ast.Subscript))]
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, (ast.Attribute, ast.Subscript)):
        targets = [node.target]
    elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute):
        targets = [node.value.func.value]
    return {n for n in (_root_name(t) for t in targets) if n is not None}


@cache
def _statements(module: str, path: Path) -> tuple[_Stmt, ...]:
    tree = parsed(path)
    future_annotations = any(isinstance(s, ast.ImportFrom) and s.module == "__future__" and
                             any(a.name == "annotations" for a in s.names) for s in tree.body)
    out = []
    for i, node in enumerate(tree.body):
        scanner = _Scanner(module, path.name == "__init__.py", future_annotations)
        scanner.visit(node)
        is_import = isinstance(node, (ast.Import, ast.ImportFrom))
        out.append(_Stmt(i, node.lineno, node, _defines(node), scanner.uses, scanner.imports, is_import,
                         _touches(node)))
    return tuple(out)


def _always_kept(stmt: _Stmt) -> bool:
    node = stmt.node
    if isinstance(node, ast.ImportFrom) and node.module == "__future__":
        return True
    return stmt.index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)


@cache
def _top_names(module: str) -> frozenset[str]:
    """Every name a module defines at top level, through its star imports too (cycles stop)."""
    path = module_path(module)
    if path is None:
        return frozenset()
    names: set[str] = set()
    for stmt in _statements(module, path):
        names |= stmt.defines
        names |= {n for imp in stmt.imports if imp.star and imp.module != module for n in _star_names(imp.module)}
    return frozenset(names)


def _star_names(module: str) -> frozenset[str]:
    return frozenset(n for n in _top_names(module) if not n.startswith("_"))


@dataclass
class _Pruned:
    plan: ModulePlan
    imports: list[_Import]  # the imports the kept statements run (star imports narrowed to the names needed)
    missing: set[str]


@cache
def _prune(module: str, path: Path, wanted: frozenset[str] | None) -> _Pruned:
    stmts = _statements(module, path)
    plan = ModulePlan(module, path)
    if wanted is None:
        return _Pruned(plan, [i for s in stmts for i in s.imports], set())
    kept: set[int] = {s.index for s in stmts if _always_kept(s)}
    subset: dict[int, set[str]] = {}
    star_needs: dict[tuple[int, str], set[str]] = {}
    need, done, missing = set(wanted), set[str](), set[str]()
    while need - done:
        name = sorted(need - done)[0]
        done.add(name)
        defs = [s for s in stmts if name in s.defines]
        for s in defs + [s for s in stmts if name in s.touches and not s.is_import]:
            if s.is_import:
                subset.setdefault(s.index, set()).add(name)
            else:
                kept.add(s.index)
                need |= s.uses
        if defs:
            continue
        star = next(((s, i) for s in stmts for i in s.imports if i.star and name in _star_names(i.module)), None)
        if star is not None:
            kept.add(star[0].index)
            star_needs.setdefault((star[0].index, star[1].module), set()).add(name)
        elif any("__getattr__" in s.defines for s in stmts):
            need.add("__getattr__")
        elif name in wanted and name not in _BUILTINS:
            missing.add(name)
    imports: list[_Import] = []
    for s in stmts:
        if s.index in kept:
            for imp in s.imports:
                if imp.star:
                    names = star_needs.get((s.index, imp.module))
                    if names:
                        imports += [_Import(imp.module, n, n, imp.site) for n in sorted(names)]
                elif not s.is_import:
                    imports.append(imp)
        elif s.index in subset:
            imports += [i for i in s.imports if i.binds in subset[s.index]]
    plan.keep_lines = sorted({s.line for s in stmts if s.index in kept or s.index in subset})
    plan.import_subset = {s.line: sorted(subset[s.index]) for s in stmts if s.index in subset and s.index not in kept}
    return _Pruned(plan, imports, missing)


@dataclass
class _State:
    wanted: dict[str, frozenset[str] | None] = field(default_factory=dict)
    plans: dict[str, ModulePlan] = field(default_factory=dict)
    deferred: list[_Import] = field(default_factory=list)
    external: list[str] = field(default_factory=list)
    unfollowed: list[Site] = field(default_factory=list)  # imports inside functions of runtime helper modules
    left_out: dict[Site, str] = field(default_factory=dict)  # conditional imports whose closure is refused


def _same_package(importer: str, target: str) -> bool:
    package = importer.rsplit(".", 1)[0]
    return package.count(".") >= 2 and target.startswith(package + ".")


def _runtime_state(module: str) -> str | None:
    for prefix, what in RUNTIME_STATE.items():
        if module == prefix or module.startswith(prefix + "."):
            return what
    return None


def _edges(imp: _Import) -> list[tuple[str, frozenset[str] | None]]:
    """(module, names or None for the whole module) that one import needs."""
    if imp.name is None:
        return [(imp.module, None)]
    sub = f"{imp.module}.{imp.name}"
    if module_path(sub) is None:
        return [(imp.module, frozenset({imp.name}))]
    if imp.site.module == imp.module or imp.name not in _top_names(imp.module):
        return [(sub, None)]  # `from . import sub` in the package itself, or a plain submodule
    return [(sub, None), (imp.module, frozenset({imp.name}))]


def _close(state: _State, start: list[_Import]) -> str | None:
    """Grow ``state`` by the strict (module-level) closure of ``start``; the refusal line, or None."""
    work = list(start)
    while work:
        imp = work.pop(0)
        top = imp.module.split(".")[0]
        if top != "sglang":
            if not imp.site.lazy and not imp.site.optional and top and top not in state.external:
                state.external.append(top)
            continue
        for target, names in _edges(imp):
            label = f"{', '.join(sorted(names))} from " if names else ""
            what = _runtime_state(target)
            if what is not None:
                return f"{imp.site.where()} imports {label}{target}, which is {what}: cannot run stand-alone"
            path = module_path(target)
            if path is None:
                return f"{imp.site.where()} imports {label}{target}, which is not a module of the installed SGLang"
            old = state.wanted.get(target, frozenset())
            new = None if names is None or old is None else old | names
            if target in state.wanted and new == old:
                continue
            state.wanted[target] = new
            pruned = _prune(target, path, new)
            if names and pruned.missing & names:
                return f"{imp.site.where()} imports {sorted(pruned.missing & names)[0]!r} from {target}, which " \
                       "does not define it"
            state.plans[target] = pruned.plan
            for e in pruned.imports:
                if e.site.lazy and not target.startswith(KERNEL_PACKAGE) and not _same_package(target, e.module):
                    if e.module.split(".")[0] == "sglang" and e.site not in state.unfollowed:
                        state.unfollowed.append(e.site)
                else:
                    deferred = e.site.lazy or e.site.optional or e.site.conditional
                    (state.deferred if deferred else work).append(e)
    return None


def _close_deferred(state: _State, missing: list[str]) -> _State:
    """Adopt each lazy/optional import whose closure resolves; record the others with their reason."""
    tried: set[_Import] = set()
    while state.deferred:
        imp = state.deferred.pop(0)
        if imp in tried:
            continue
        tried.add(imp)
        trial = _State(dict(state.wanted), dict(state.plans), [], list(state.external), list(state.unfollowed),
                       dict(state.left_out))
        refusal = _close(trial, [imp])
        if refusal is None:
            trial.deferred = state.deferred + trial.deferred
            state = trial
        elif imp.module.split(".")[0] == "sglang":
            how = "inside a function" if imp.site.lazy else "guarded by try" if imp.site.optional else \
                "under a module-level if, bound to a placeholder that raises if used"
            if not imp.site.lazy and not imp.site.optional:
                state.left_out.setdefault(imp.site, refusal)
            line = f"{imp.site.where()} ({how}): {refusal}"
            if line not in missing:
                missing.append(line)
    return state


@cache
def python_closure(root: str) -> PyClosureResult:
    """The vendoring plan of the Triton module ``root`` (an SGLang module name), or the reason there is none."""
    result = PyClosureResult(root=root)
    if module_path(root) is None:
        result.refusal = f"{root} is not a module of the installed SGLang"
        return result
    state = _State()
    try:
        refusal = _close(state, [_Import(root, None, None, Site(root, 0))])
        if refusal is None:
            state = _close_deferred(state, result.lazy_missing)
    except (SyntaxError, UnicodeDecodeError, RecursionError) as e:
        refusal = f"cannot parse the closure of {root}: {type(e).__name__}: {e}"
    if refusal is not None:
        result.refusal = refusal
        return result
    result.modules = {root: state.plans[root], **{k: state.plans[k] for k in sorted(state.plans) if k != root}}
    for site, why in state.left_out.items():
        if site.module in result.modules:
            plan = copy.copy(result.modules[site.module])
            plan.left_out = {**plan.left_out, site.line: why}
            result.modules[site.module] = plan
    result.external = state.external
    result.lazy_missing += [f"{site.where()} (inside a function of a runtime helper): not followed"
                            for site in state.unfollowed if site.module in state.plans]
    return result
