"""Static screening of candidate sources before anything builds, imports or runs them.

A candidate is untrusted code: whatever runs in a process can rebind that process's checker and clock. The worker
separation is the real defence; this screen rejects up front, with a named rule, code that has no business in a
kernel and whose use is to reach outside it. The rules are heuristics on the text that err towards rejecting;
SGLang's own kernels and every correct candidate in tests/candidates pass them (tests/test_screen.py proves it,
one test per rule). A verdict reads ``screen: <rule>: line <n> <detail>``.

Python / Triton (``ast``; unparsable code is left to the build, which reports the SyntaxError):
- forbidden-import: only ``torch``, ``triton`` and the pure ``math cmath typing typing_extensions functools
  dataclasses itertools operator numbers enum collections abc fractions heapq bisect contextlib re __future__``;
  never a private ``_x`` submodule, a denied part (below) or a relative import.
- forbidden-builtin: ``eval exec compile open globals locals vars __import__ breakpoint setattr delattr``;
  ``getattr``/``hasattr`` with a computed name or passed as a value; an annotation string that is no expression
  (annotation strings are parsed and screened like code: ``typing.get_type_hints`` would evaluate them).
- frame-access: ``_getframe f_back f_globals f_locals f_builtins f_code tb_frame tb_next gi_frame cr_frame
  ag_frame __traceback__`` as attributes, literal getattr names or string literals.
- dunder-access: any ``__x__`` attribute except ``__name__ __qualname__ __doc__ __init__ __version__ __file__
  __module__``; the names ``__builtins__ __import__ __loader__ __spec__``; such names as string literals.
- forbidden-attribute: an attribute named like a process-level module (``torch.os``, ``x.sys``), ``_C
  cpp_extension load_inline load_library library hub distributed attrgetter methodcaller get_type_hints
  ForwardRef``, a private ``_x`` attribute of a module (``triton.language``'s device helpers excepted), and,
  through any alias, the parts of torch/triton that compile or load native code, run strings as code, start
  processes or poison caches: ``torch.utils.cpp_extension/benchmark/collect_env``, ``torch.jit fx export compile
  compiler library hub multiprocessing distributed profiler cuda.memory`` (``torch.compiler.is_compiling`` and
  ``disable`` excepted), ``triton.runtime.cache/build``, ``triton.compiler``, ``triton.backends``; where a
  function, list or loop hides the path (``def u(): return torch.utils``), by the attribute's name alone.
- file-access: ``torch.save load from_file serialization``.
- global-state: ``torch.set_* manual_seed seed random use_deterministic_algorithms``, ``torch.cuda.set_*
  manual_seed* seed random``, ``contextlib.chdir``.
- module-assignment: assigning, augmenting or deleting an attribute or item of an imported name or of anything
  it reaches by attributes/items (aliases included: ``E = torch.cuda.Event; E.x = ...``), or an attribute of a
  call's result (``type(t).add = ...``; items of one, ``x.view(-1)[i] = v``, are fine).
- global-rebinding: ``global`` of an imported name.

CUDA (the text with comments removed; string literals are read only for includes, asm and ``/proc/``):
- forbidden-include: ``#include MACRO``, ``#include_next``, ``#import``, or a header that is neither a file of
  the op folder (through the recipe's include dirs or next to the original source) nor on the allowlist (CUDA's
  ``cuda* cub cute cutlass cooperative_groups curand cublas thrust ...``, ``tvm/ffi``, ``dlpack``, ``hip``, and
  the standard C/C++ headers other than thread, process, signal, file-system and dynamic-loading ones).
- python-api: ``Python.h``, ``Python``, ``Py*``/``_Py*`` identifiers, ``pybind11``, ``nanobind``.
- dynamic-loading: ``dlfcn.h``, ``dlopen dlsym dlmopen dlvsym dladdr dlinfo dl_iterate_phdr __libc_dlopen_mode
  _dl_sym RTLD_* link_map``.
- process-control: calls of ``fork vfork exec* system popen posix_spawn* clone clone3 syscall kill signal
  sigaction mprotect mmap process_vm_* ptrace setenv putenv unsetenv atexit at_quick_exit``; ``pthread_*
  std::thread std::jthread std::async __builtin_frame_address __builtin_return_address environ``.
- file-access: ``fopen freopen tmpfile creat openat rename unlink rmdir truncate chmod remove(path)
  std::*fstream std::filesystem``, ``/proc/`` paths.
- symbol-interposition: host ``extern "C"`` (device declarations such as ``extern "C" __device__ float
  __nv_tanhf(float);`` are fine), the attributes ``alias weak weakref ifunc visibility``, a global
  non-inline, non-static function named like a CUDA, libc or Python API or ``operator new/delete``, and asm
  templates naming such symbols.
- static-initializer: ``constructor destructor init_priority section`` attributes, ``[[gnu::constructor]]``,
  ``init_array``/``ctors`` names, ``#pragma init/fini``; at namespace scope (outside function and class bodies;
  ``constexpr constinit __device__ __constant__`` variables excepted): a lambda invoked, an initializer that calls
  anything (``sizeof alignof decltype`` and casts excepted), a class-typed direct-initialisation with non-literal
  arguments (``dim3 g(4, 1, 1)`` is constant) or of a class this file gives a constructor, or a default-initialised
  object of a class this file gives a constructor or destructor; in class bodies, a ``static inline`` member
  initialised by a call. Limits: the scanner reads the text, not the preprocessed unit (a macro defined elsewhere
  that expands to such a declaration is not seen, nor is a class with a constructor defined in a header);
  function-local statics, initialised on first call inside the candidate's own run, are allowed.
- host-asm: ``asm`` at namespace scope (it can emit sections and symbols) and asm templates naming host
  system-call instructions (``syscall sysenter int $0x80 svc``); inline PTX inside functions is fine.
- token-pasting: ``##`` joining two macro parameters, or a fragment that begins a banned name.

Out of reach of any text screen, left to the separation: raw-pointer reads and writes of host memory, APIs of
the allowed libraries not listed here, and a name built at run time from pieces.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from astra_sglang import pyast
from astra_sglang.contract.op import CudaJitRecipe, Manifest, TritonRecipe
from astra_sglang.contract.result import BuildReport


@dataclass(frozen=True)
class Finding:
    rule: str
    line: int
    detail: str

    def __str__(self) -> str:
        return f"screen: {self.rule}: line {self.line} {self.detail}"


def _unique(findings: list[Finding]) -> list[Finding]:
    """By line (stable, so the rule order of the checks breaks ties), each finding once."""
    return list(dict.fromkeys(sorted(findings, key=lambda f: f.line)))


# ---------------------------------------------------------------------------------------------- Python

ALLOWED_MODULES = frozenset({
    "torch", "triton", "math", "cmath", "typing", "typing_extensions", "functools", "dataclasses", "itertools",
    "operator", "numbers", "enum", "collections", "abc", "fractions", "heapq", "bisect", "contextlib", "re",
    "__future__",
})
FORBIDDEN_MODULES = frozenset({
    "sys", "gc", "inspect", "ctypes", "os", "posix", "subprocess", "threading", "_thread", "multiprocessing",
    "importlib", "builtins", "signal", "socket", "pickle", "marshal", "types", "weakref", "atexit", "sglang",
    "astra_sglang", "faulthandler", "code", "codeop", "runpy", "pathlib", "shutil", "io", "tempfile", "mmap",
    "resource", "traceback", "time", "asyncio", "concurrent", "sysconfig", "site", "cffi", "numpy",
})
# parts of the allowed libraries that compile or load native code, run strings as code, start processes, write
# files or change process-wide state: (dotted prefix, rule); assignments into the rest are module-assignment
_DENIED_PATHS = tuple((p, "forbidden-attribute") for p in (
    "torch.utils.cpp_extension", "torch.utils.benchmark", "torch.utils.collect_env", "torch.utils.bottleneck",
    "torch.utils.hipify", "torch.utils.tensorboard", "torch.utils.data", "torch.multiprocessing",
    "torch.distributed", "torch.library", "torch.hub", "torch.package", "torch.jit", "torch.fx", "torch.export",
    "torch.onnx", "torch.profiler", "torch.compile", "torch.compiler", "torch.ops.load_library", "torch.classes",
    "torch.cuda.memory", "torch.cuda.CUDAPluggableAllocator", "torch.cuda.change_current_allocator",
    "triton.backends", "triton.runtime.build", "triton.runtime.cache", "triton.compiler", "triton.tools.disasm",
    "triton.tools.compile", "triton.tools.link",
)) + tuple((p, "file-access") for p in ("torch.save", "torch.load", "torch.from_file", "torch.serialization")) + \
    tuple((p, "global-state") for p in (
        "torch.set_", "torch.manual_seed", "torch.seed", "torch.random", "torch.use_deterministic_algorithms",
        "torch.cuda.manual_seed", "torch.cuda.seed", "torch.cuda.set_", "torch.cuda.random", "contextlib.chdir",
    ))
_DENIED_LEAVES = {p.rsplit(".", 1)[1]: rule for p, rule in _DENIED_PATHS if not p.endswith("_")}
# harmless names under a denied prefix that SGLang's own kernels use
_ALLOWED_PATHS = ("torch.compiler.is_compiling", "torch.compiler.is_dynamo_compiling", "torch.compiler.disable")
_FORBIDDEN_BUILTINS = frozenset({"eval", "exec", "compile", "open", "globals", "locals", "vars", "__import__",
                                 "breakpoint", "setattr", "delattr"})
_FRAME_ATTRS = frozenset({"_getframe", "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "tb_frame",
                          "tb_next", "gi_frame", "cr_frame", "ag_frame", "__traceback__"})
_DUNDER_OK = frozenset({"__name__", "__qualname__", "__doc__", "__init__", "__version__", "__file__", "__module__"})
_DUNDER_NAMES = frozenset({"__builtins__", "__import__", "__loader__", "__spec__"})
# modules whose only use as an attribute (``torch.os``, ``jit.sys``) is a way around the import rule; not every
# forbidden module (``x.numpy()``, ``err.code`` and ``t.time`` are ordinary attributes)
_MODULE_ATTRS = frozenset({"sys", "os", "gc", "inspect", "ctypes", "posix", "subprocess", "threading", "_thread",
                           "multiprocessing", "importlib", "builtins", "pickle", "marshal", "weakref", "atexit",
                           "sglang", "astra_sglang", "faulthandler", "runpy", "shutil", "socket", "cffi"})
_FORBIDDEN_ATTRS = _MODULE_ATTRS | {"_C", "cpp_extension", "load_inline", "load_library", "library", "hub",
                                        "distributed", "attrgetter", "methodcaller", "get_type_hints",
                                        "ForwardRef", "CUDAPluggableAllocator", "change_current_allocator"}
_DUNDER = re.compile(r"^__\w+__$")


def _module_problem(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] in FORBIDDEN_MODULES:
        return f"imports {name} (forbidden)" + (
            ": candidates must not import sglang or astra_sglang" if parts[0] in ("sglang", "astra_sglang") else "")
    if parts[0] not in ALLOWED_MODULES:
        return f"imports {name} (not on the allowlist: {', '.join(sorted(ALLOWED_MODULES))})"
    private = any(p.startswith("_") for p in parts[1:]) and not name.startswith("triton.language.")
    if private or _denied_path(name) is not None:
        return f"imports {name} (a private or process-level part of {parts[0]})"
    return None


def _denied_path(path: str) -> str | None:
    """The rule a dotted name of torch/triton breaks (``torch.set_`` covers every ``torch.set_*``), or None."""
    if any(a == path or a.startswith(path + ".") for a in _ALLOWED_PATHS):
        return None
    for prefix, rule in _DENIED_PATHS:
        if path == prefix or path.startswith(prefix if prefix.endswith("_") else prefix + "."):
            return rule
    return None


def _attr_problem(attr: str) -> tuple[str, str] | None:
    if attr in _FRAME_ATTRS:
        return "frame-access", f"reaches {attr}"
    if _DUNDER.match(attr) and attr not in _DUNDER_OK:
        return "dunder-access", f"reaches {attr}"
    if attr in _FORBIDDEN_ATTRS:
        return "forbidden-attribute", f"reaches .{attr}"
    return None


class _PythonScreen:
    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.imported: set[str] = set()
        self.tainted: set[str] = set()  # imported names and names bound to what they reach by attributes
        self.paths: dict[str, str] = {}  # such a name -> the dotted path it stands for, where known
        self.returners: set[str] = set()  # functions of this file that return such a thing
        self.findings: list[Finding] = []

    def add(self, rule: str, node: ast.AST, detail: str) -> None:
        self.findings.append(Finding(rule, getattr(node, "lineno", 0), detail))

    def reaches_module(self, e: ast.AST | None) -> bool:
        if isinstance(e, ast.Name):
            return e.id in self.tainted
        if isinstance(e, (ast.Attribute, ast.Subscript, ast.Starred)):
            return self.reaches_module(e.value)
        if isinstance(e, (ast.Tuple, ast.List, ast.Set)):
            return any(self.reaches_module(x) for x in e.elts)
        if isinstance(e, ast.Dict):
            return any(self.reaches_module(x) for x in e.values)
        if isinstance(e, ast.IfExp):
            return self.reaches_module(e.body) or self.reaches_module(e.orelse)
        if isinstance(e, ast.BoolOp):
            return any(self.reaches_module(x) for x in e.values)
        if isinstance(e, ast.NamedExpr):
            return self.reaches_module(e.value)
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "getattr" and e.args:
            return self.reaches_module(e.args[0])
        if isinstance(e, ast.Call):  # a call of a function of this file that hands back a module (not any call:
            # ``triton.Config(...)`` makes an ordinary object)
            return (isinstance(e.func, ast.Name) and e.func.id in self.returners) or (
                isinstance(e.func, ast.Lambda) and self.reaches_module(e.func.body))
        if isinstance(e, ast.Lambda):
            return self.reaches_module(e.body)
        return False

    def dotted(self, e: ast.AST) -> str | None:
        if isinstance(e, ast.Name):
            return self.paths.get(e.id)
        if isinstance(e, ast.Attribute):
            base = self.dotted(e.value)
            return f"{base}.{e.attr}" if base else None
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "getattr" and len(e.args) > 1 \
                and isinstance(e.args[1], ast.Constant) and isinstance(e.args[1].value, str):
            base = self.dotted(e.args[0])
            return f"{base}.{e.args[1].value}" if base else None
        return None

    def _bind(self, target: ast.AST) -> None:
        """The names a binding creates (``x``, ``a, *b``), not those it only indexes into (``x[i] = ...``)."""
        if isinstance(target, ast.Name):
            self.tainted.add(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._bind(t)
        elif isinstance(target, ast.Starred):
            self._bind(target.value)

    def collect_names(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    name = a.asname or a.name.split(".")[0]
                    self.imported.add(name)
                    self.tainted.add(name)
                    if isinstance(node, ast.Import):
                        self.paths[name] = a.name if a.asname else name
                    elif not node.level and a.name != "*":
                        self.paths[name] = f"{node.module}.{a.name}"
        changed = True
        while changed:  # aliases of aliases, in any order of definition
            before = len(self.tainted) + len(self.paths) + len(self.returners)
            for node in ast.walk(self.tree):
                if isinstance(node, ast.Assign) and self.reaches_module(node.value):
                    for t in node.targets:
                        self._bind(t)
                        if isinstance(t, ast.Name) and (path := self.dotted(node.value)) and t.id not in self.paths:
                            self.paths[t.id] = path
                elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and self.reaches_module(node.value):
                    self._bind(node.target)
                elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) and self.reaches_module(node.iter):
                    self._bind(node.target)
                elif isinstance(node, ast.withitem) and node.optional_vars is not None and self.reaches_module(
                        node.context_expr):
                    self._bind(node.optional_vars)
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                        isinstance(r, ast.Return) and self.reaches_module(r.value) for r in ast.walk(node)):
                    self.returners.add(node.name)
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda) and self.reaches_module(
                        node.value.body):
                    self.returners.update(t.id for t in node.targets if isinstance(t, ast.Name))
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    sig: ast.arguments = node.args
                    pos = sig.posonlyargs + sig.args
                    for arg, d in list(zip(pos[len(pos) - len(sig.defaults):], sig.defaults)) + [
                            (k, d) for k, d in zip(sig.kwonlyargs, sig.kw_defaults) if d is not None]:
                        if self.reaches_module(d):
                            self.tainted.add(arg.arg)
            changed = len(self.tainted) + len(self.paths) + len(self.returners) != before

    def check_target(self, t: ast.AST, verb: str) -> None:
        if isinstance(t, (ast.Tuple, ast.List)):
            for x in t.elts:
                self.check_target(x, verb)
            return
        if isinstance(t, ast.Starred):
            self.check_target(t.value, verb)
            return
        if not isinstance(t, (ast.Attribute, ast.Subscript)):
            return
        base = t.value
        while isinstance(base, (ast.Attribute, ast.Subscript)):
            base = base.value
        what = ast.unparse(t)
        if isinstance(base, ast.Call) and isinstance(t, ast.Attribute):  # `x.view(-1)[i] = v` is ordinary
            self.add("module-assignment", t, f"{verb} {what} (an attribute of a call's result)")
        elif self.reaches_module(t.value):
            self.add("module-assignment", t, f"{verb} {what} (reached from an imported module)")

    def annotation_trees(self) -> Iterator[ast.AST]:
        """String annotations parsed as the expressions they are (``typing.get_type_hints`` and friends evaluate
        them), each carrying its line; an annotation string that is no expression is a finding."""
        for node in ast.walk(self.tree):
            ann = [node.annotation] if isinstance(node, (ast.arg, ast.AnnAssign)) and node.annotation else []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
                ann.append(node.returns)
            for a in ann:
                for c in ast.walk(a):
                    if isinstance(c, ast.Constant) and isinstance(c.value, str):
                        try:
                            expr = pyast.parse_eval(c.value.strip())
                        except SyntaxError:
                            self.add("forbidden-builtin", c, f"has an annotation string that is no expression: "
                                                             f"{c.value[:60]!r}")
                            continue
                        for n in ast.walk(expr):
                            n.lineno = c.lineno  # type: ignore[attr-defined]
                        yield expr

    def run(self) -> list[Finding]:
        self.collect_names()
        called = {id(n.func) for n in ast.walk(self.tree) if isinstance(n, ast.Call)}
        trees = [self.tree, *self.annotation_trees()]
        for node in (n for t in trees for n in ast.walk(t)):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if (p := _module_problem(a.name)) is not None:
                        self.add("forbidden-import", node, p)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    self.add("forbidden-import", node, "imports relatively (a candidate is one file)")
                    continue
                mod = node.module or ""
                p = _module_problem(mod)
                if p is None:
                    for a in node.names:
                        if a.name != "*" and (_module_problem(f"{mod}.{a.name}") is not None
                                              or a.name in _FORBIDDEN_ATTRS):
                            p = f"imports {a.name} from {mod}"
                            break
                if p is not None:
                    self.add("forbidden-import", node, p)
            elif isinstance(node, ast.Name):
                if node.id in _FORBIDDEN_BUILTINS and node.id not in self.imported:
                    self.add("forbidden-builtin", node, f"uses {node.id}")
                elif node.id in ("getattr", "hasattr") and id(node) not in called and node.id not in self.imported:
                    self.add("forbidden-builtin", node, f"uses {node.id} as a value (names it could compute)")
                elif node.id in _DUNDER_NAMES:
                    self.add("dunder-access", node, f"uses {node.id}")
                elif (path := self.paths.get(node.id)) and (rule := _denied_path(path)) is not None:
                    self.add(rule, node, f"uses {path}")
            elif isinstance(node, ast.Attribute):
                if (hit := _attr_problem(node.attr)) is not None:
                    self.add(hit[0], node, hit[1])
                elif (path := self.dotted(node)) and (rule := _denied_path(path)) is not None:
                    self.add(rule, node, f"uses {path}")
                elif path is None and node.attr in _DENIED_LEAVES and self.reaches_module(node.value):
                    self.add(_DENIED_LEAVES[node.attr], node, f"reaches .{node.attr} of a module by a path it hides")
                elif node.attr.startswith("_") and not _DUNDER.match(node.attr) and self.reaches_module(node.value) \
                        and not (self.dotted(node) or "").startswith("triton.language."):
                    self.add("forbidden-attribute", node, f"reaches the private {ast.unparse(node)}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                v = node.value
                if v in _FRAME_ATTRS or (_DUNDER.match(v) and v not in _DUNDER_OK and v != "__main__"):
                    self.add("frame-access" if v in _FRAME_ATTRS else "dunder-access", node, f"names {v!r}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                    "getattr", "hasattr") and node.func.id not in self.imported:
                name = node.args[1] if len(node.args) > 1 else None
                if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                    self.add("forbidden-builtin", node, f"calls {node.func.id} with a computed name")
                elif (hit := _attr_problem(name.value)) is not None:
                    self.add(hit[0], node, hit[1])
            elif isinstance(node, (ast.Assign, ast.Delete)):
                for t in node.targets:
                    self.check_target(t, "deletes" if isinstance(node, ast.Delete) else "assigns")
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                self.check_target(node.target, "assigns")
            elif isinstance(node, ast.Global):
                for n in node.names:
                    if n in self.imported:
                        self.add("global-rebinding", node, f"declares the imported name {n} global")
        return _unique(self.findings)


def screen_python(source: str) -> list[Finding]:
    """Every finding in a Python/Triton candidate, by line; [] for a clean or an unparsable source."""
    try:
        tree = pyast.parse(source)
    except (SyntaxError, ValueError):
        return []
    return _PythonScreen(tree).run()


# ------------------------------------------------------------------------------------------------ CUDA

_STD_HEADERS = frozenset("""
algorithm any array atomic barrier bit bitset cassert ccomplex cctype cerrno cfenv cfloat charconv chrono
cinttypes ciso646 climits clocale cmath compare complex concepts condition_variable cstdarg cstdbool cstddef
cstdint cstdio cstdlib cstring ctgmath ctime cuchar cwchar cwctype deque exception expected
format forward_list functional initializer_list iomanip ios iosfwd iostream istream iterator latch limits
list locale map memory memory_resource mutex new numbers numeric optional ostream queue random ranges ratio
regex scoped_allocator semaphore set shared_mutex source_location span sstream stack stdexcept stdfloat
streambuf string string_view system_error tuple type_traits typeindex typeinfo unordered_map unordered_set
utility valarray variant vector version fstream
assert.h complex.h ctype.h errno.h fenv.h float.h inttypes.h iso646.h limits.h locale.h math.h stdarg.h
stdbool.h stddef.h stdint.h stdio.h stdlib.h string.h tgmath.h time.h uchar.h wchar.h wctype.h
""".split())
_HEADER_PREFIXES = ("cuda", "cub/", "cute/", "cutlass/", "cooperative_groups", "curand", "cublas", "cufft",
                    "cusparse", "nvtx3/", "nv/", "thrust/", "mma.h", "sm_", "vector_types.h", "vector_functions.h",
                    "device_types.h", "device_functions.h", "device_launch_parameters.h", "driver_types.h",
                    "host_defines.h", "math_constants.h", "crt/", "texture_", "surface_", "tvm/ffi/", "dlpack/",
                    "hip/")

_CALLS = {
    "dynamic-loading": ("dlopen", "dlsym", "dlmopen", "dlvsym", "dladdr", "dladdr1", "dlinfo", "dlclose",
                        "dl_iterate_phdr", "__libc_dlopen_mode", "__libc_dlsym", "_dl_sym", "LoadLibraryA",
                        "LoadLibraryW", "GetProcAddress"),
    "process-control": ("fork", "vfork", "execl", "execle", "execlp", "execv", "execve", "execvp", "execvpe",
                        "fexecve", "system", "popen", "posix_spawn", "posix_spawnp", "clone", "clone3", "syscall",
                        "kill", "signal", "sigaction", "mprotect", "mmap", "mmap64", "process_vm_writev",
                        "process_vm_readv", "ptrace", "setenv", "putenv", "unsetenv", "atexit", "at_quick_exit"),
    "file-access": ("fopen", "fopen64", "freopen", "tmpfile", "creat", "openat", "rename", "renameat", "unlink",
                    "unlinkat", "rmdir", "truncate", "chmod", "remove"),
}
_WORDS = [
    ("python-api", re.compile(r"\b(_?Py[A-Z_]\w*|Python|pybind11|nanobind|PYBIND11_\w+|NB_MODULE)\b")),
    ("dynamic-loading", re.compile(r"\b(RTLD_\w+|link_map|dlfcn)\b")),
    ("process-control", re.compile(r"\b(pthread_\w+|std\s*::\s*(thread|jthread|async)|__NR_\w+|"
                                   r"__builtin_(frame|return)_address|__builtin_extract_return_addr|environ)\b")),
    ("file-access", re.compile(r"\bstd\s*::\s*(ifstream|ofstream|fstream|filesystem|basic_\w*fstream)\b")),
    ("symbol-interposition", re.compile(r"\b(alias|weakref|ifunc|visibility)\s*\(|"
                                        r"__attribute__\s*\(\([^)]*\bweak\b|\[\[\s*gnu\s*::\s*weak\b")),
    ("static-initializer", re.compile(r"\b(constructor|destructor|init_priority|section)\s*(\(|\)\))|"
                                      r"\[\[\s*gnu\s*::\s*(constructor|destructor)\b|\b(init_array|fini_array|"
                                      r"preinit_array|ctors|dtors)\b")),
]
_BANNED_NAMES = sorted({n for names in _CALLS.values() for n in names} | {"Py", "_Py", "pybind", "nanobind",
                                                                          "RTLD_", "pthread_", "dl"})
_ASM_HOST = re.compile(r"\b(syscall|sysenter|sysexit|int\s*\$?0x80|svc)\b")
_ASM = re.compile(r"\b(asm|__asm__|__asm)\b")
_IDENT = re.compile(r"[A-Za-z_]\w*")
_CONST_CALLS = frozenset({"sizeof", "alignof", "alignas", "decltype", "static_cast", "const_cast",
                          "reinterpret_cast", "noexcept", "__align__", "__launch_bounds__", "__attribute__",
                          "defined", "static_assert", "typeid"})
_SCALARS = frozenset({"bool", "char", "short", "int", "long", "float", "double", "unsigned", "signed", "void",
                      "auto", "size_t", "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t",
                      "uint32_t", "uint64_t", "const", "volatile", "static", "inline", "extern", "thread_local",
                      "float2", "float4", "int2", "int4", "uint2", "uint4", "half", "__half", "__nv_bfloat16",
                      "std", "uintptr_t", "intptr_t", "ptrdiff_t"})


def _lines_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _strip_cuda(text: str) -> tuple[str, list[tuple[int, str]]]:
    """Comments removed and string/char literals blanked (both keep their newlines, so positions and line numbers
    still hold), plus the literals with their positions."""
    out: list[str] = []
    strings: list[tuple[int, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            while j > 0 and text[j - 1] == "\\" and j < n:  # a line comment continued by backslash-newline
                k = text.find("\n", j + 1)
                j = n if k < 0 else k
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^()\\ ]{0,16})\(', text[i:])
            if m:
                end = text.find(")" + m.group(1) + '"', i)
                end = n if end < 0 else end + len(m.group(1)) + 2
                strings.append((i, text[i + len(m.group(0)):end - len(m.group(1)) - 2]))
                out.append('"' + re.sub(r"[^\n]", " ", text[i + 1:end - 1]) + '"')
                i = end
                continue
            out.append(c)
            i += 1
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator (1'000'000)
                out.append(c)
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            strings.append((i, text[i + 1:j - 1]))
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + (c if j - 1 > i else ""))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out), strings


@dataclass
class _Includes:
    search_dirs: Sequence[Path]
    root: Path | None

    def local(self, name: str) -> bool:
        if self.root is None or Path(name).is_absolute():
            return False
        for d in self.search_dirs:
            p = (d / name).resolve()
            if p.is_file() and p.is_relative_to(self.root):
                return True
        return False

    def problem(self, name: str, quoted: bool) -> str | None:
        if self.local(name):
            return None
        norm = name.replace("\\", "/")
        if ".." in norm.split("/") or norm.startswith("/"):
            return f"includes {name} (outside the op folder)"
        if norm in _STD_HEADERS or norm.startswith(_HEADER_PREFIXES):
            return None
        return f"includes {name} (" + ("not a file of the op folder" if quoted else "not on the allowlist") + ")"


def _host_c_linkage(code: str) -> Iterator[int]:
    """Positions of ``extern "C"`` that give a host symbol C linkage; device declarations (``extern "C"
    __device__ float __nv_tanhf(float);``, alone or in a block) live in the GPU module and shadow nothing."""
    device = re.compile(r"\b(__device__|__global__)\b")
    for m in re.finditer(r"\bextern\s*\"[^\"\n]*\"\s*", code):
        if code.startswith("{", m.end()):
            block = code[m.end() + 1:_balanced(code, m.end(), "{", "}") - 1]
            if all(device.search(d) for d in re.split(r"[;}]", block) if d.strip()):
                continue
        elif device.match(code, m.end()):
            continue
        yield m.start()


def _pasting(code: str) -> Iterator[tuple[int, str]]:
    for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(\(([^)]*)\))?((?:\\\n|[^\n])*)", code, re.M):
        params = {p.strip() for p in (m.group(3) or "").split(",") if p.strip()} | {"__VA_ARGS__"}
        body = m.group(4)
        for p in re.finditer(r"(\w*)\s*##\s*(\w*)", body):
            left, right = p.group(1), p.group(2)
            if left in params and right in params and left != "__VA_ARGS__" and right != "__VA_ARGS__":
                yield m.start(4) + p.start(), f"pastes two macro parameters ({left} ## {right}) in {m.group(1)}"
            for lit in (left if left not in params else "",):
                if lit and any(b.startswith(lit) or lit.startswith(b) for b in _BANNED_NAMES):
                    yield m.start(4) + p.start(), f"pastes {lit!r} into a name in {m.group(1)}"


def _balanced(code: str, i: int, open_: str, close: str) -> int:
    """Index just past the bracket closing the one at ``i``."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == open_:
            depth += 1
        elif code[j] == close:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(code)


def _strip_template_head(s: str) -> str:
    s = s.strip()
    while s.startswith("template"):
        k = s.find("<")
        if k < 0:
            return s
        depth, j = 0, k
        for j in range(k, len(s)):
            depth += {"<": 1, ">": -1}.get(s[j], 0)
            if depth == 0:
                break
        s = s[j + 1:].strip()
    return s


def _top_level(s: str, ch: str) -> int:
    depth = 0
    for i, c in enumerate(s):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == ch and depth == 0 and (ch != "=" or (s[i + 1:i + 2] != "=" and s[i - 1:i] not in "=!<>")):
            return i
    return -1


def _has_call(s: str) -> str | None:
    """What an initializer calls (so it runs code at load time), or None. A lambda's body only runs when the
    lambda is invoked, so bodies are blanked first and ``}(`` counts as the call."""
    if re.search(r"\}\s*\(", s):
        return "an invoked lambda"
    out: list[str] = []
    i = 0
    while i < len(s):
        if s[i] == "{" and re.search(r"[)\]]\s*(mutable\s*|noexcept\s*|->[^{]*)?$", "".join(out)):
            i = _balanced(s, i, "{", "}")
            out.append("{}")
            continue
        out.append(s[i])
        i += 1
    for m in re.finditer(r"([A-Za-z_]\w*)\s*(?:<[^;{}()]*>)?\s*\(", "".join(out)):
        if m.group(1) not in _CONST_CALLS:
            return m.group(1)
    return None


def _split_items(s: str) -> list[str]:
    items: list[str] = []
    cur: list[str] = []
    depth = 0
    for c in s:
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        if c == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    items.append("".join(cur))
    return [x.strip() for x in items if x.strip()]


def _looks_like_params(args: str) -> bool:
    """A function declaration's parameter list (``int a, const T& b``, ``void``) rather than constructor arguments."""
    items = _split_items(args)
    if not items or items == ["void"]:
        return True
    for it in items:
        it = it.split("=")[0]
        words = _IDENT.findall(it)
        if len(words) >= 2 and not re.search(r"(?<!\w)\d|\"|'|\b(true|false|nullptr)\b|[+\-/%^|!~?]", it):
            continue
        if len(words) == 1 and (words[0] in _SCALARS or words[0][0].isupper() or "::" in it or "<" in it):
            continue  # an unnamed parameter of a type (``Foo make(Bar);``); a lowercase name is a variable
        return False
    return True


def _classify_statement(stmt: str, ctor_classes: set[str]) -> str | None:
    """Why a namespace-scope statement runs code at load time, or None."""
    s = _strip_template_head(stmt)
    if not s or s.startswith(("using", "typedef", "static_assert", "namespace", "friend", "enum", "concept", "#")):
        return None
    if stmt.lstrip().startswith("template"):
        return None
    words = set(_IDENT.findall(s))
    if words & {"constexpr", "constinit", "consteval", "__device__", "__constant__", "__shared__", "__managed__",
                "__global__"}:
        return None
    eq = _top_level(s, "=")
    if eq >= 0:
        what = _has_call(s[eq + 1:])
        return f"a namespace-scope variable initialised by {what}" if what else None
    if re.search(r"\]\s*(\([^()]*\))?\s*(mutable)?\s*\{.*\}\s*\(", s, re.S):
        return "a lambda invoked at namespace scope"
    m = re.match(r"(.*?)\b([A-Za-z_]\w*)\s*(\{(.*)\}|\((.*)\))\s*$", s, re.S)
    if m:
        head, name, brace, paren = m.group(1), m.group(2), m.group(4), m.group(5)
        type_words = set(_IDENT.findall(head)) - _SCALARS
        if brace is not None:
            what = _has_call(brace)
            return f"{name} initialised by {what} at namespace scope" if what else None
        literal_args = re.fullmatch(r"[\s,.\-+\w\"']*", paren or "") and not _has_call(paren or "") and not (
            set(_IDENT.findall(paren or "")) - {"true", "false", "nullptr"} - {w for w in _IDENT.findall(
                paren or "") if re.fullmatch(r"\d\w*|0x\w+", w)})
        plain = literal_args and not (type_words & ctor_classes)  # `const dim3 C::grid(4, 1, 1);` is constant
        if paren is not None and head.strip() and type_words and not plain and not _looks_like_params(paren) and \
                not re.search(r"\)\s*(const|noexcept|override|->)", s):
            return f"{name} constructed with arguments at namespace scope"
        return None
    m = re.match(r"(?:static\s+|inline\s+|extern\s+)*([A-Za-z_][\w:]*)\s*(?:<.*>)?\s+[*&]?\s*([A-Za-z_]\w*)\s*$", s)
    if m and m.group(1).split("::")[-1] in ctor_classes:
        return f"{m.group(2)} of class {m.group(1)} (which has a constructor or destructor) at namespace scope"
    return None


_INTERPOSABLE = re.compile(r"^((cuda|cu|nvrtc|cublas|nccl|ncclx)[A-Z]\w*|_?Py\w+|operator\s*(new|delete)\b.*|"
                           r"(malloc|calloc|realloc|free|memcpy|memmove|memset|dlopen|dlsym|open|read|write|close|"
                           r"exit|_exit|abort|getenv|pthread_\w+|clock_gettime|gettimeofday|time)$)")
_STATIC_MEMBER = re.compile(r"\b(?:static\s+inline|inline\s+static)\b([^;{}()]*?)\b([A-Za-z_]\w*)\s*"
                            r"(=[^;]*|\{[^;]*\})\s*;")


def _namespace_scope(code: str) -> Iterator[tuple[int, str, str]]:
    """(position, rule, reason) for what runs or binds at load time outside any function: namespace-scope
    statements with dynamic initialisation, top-level asm, global functions that would shadow a CUDA, libc or
    Python symbol, and class-scope ``static inline`` members initialised by a call. ``code`` has comments
    removed and literals blanked."""
    code = re.sub(r"^[ \t]*#(?:\\\n|[^\n])*", lambda m: re.sub(r"[^\n]", " ", m.group(0)), code, flags=re.M)
    ctor_classes: set[str] = set()
    depth = 0  # open namespace blocks (function and class bodies are skipped whole)
    start, i, n = 0, 0, len(code)
    while i < n:
        c = code[i]
        if c == ";":
            stmt = code[start:i]
            if _ASM.search(stmt):
                yield start, "host-asm", "asm at namespace scope"
            elif (why := _classify_statement(stmt, ctor_classes)) is not None:
                yield start + len(stmt) - len(stmt.lstrip()), "static-initializer", why
            start = i + 1
        elif c == "}":
            depth = max(0, depth - 1)
            start = i + 1
        elif c == "{":
            head = code[start:i]
            h = _strip_template_head(head)
            if re.search(r"\bnamespace\b", h) or re.fullmatch(r"\s*extern\s*\"\s*\"\s*", head):
                depth += 1
                start = i + 1
                i += 1
                continue
            if _top_level(h, "=") >= 0 or (re.search(r"[\w\]]\s*$", h) and "(" not in h
                                            and not re.search(r"\b(struct|class|union|enum)\b", h)):
                i = _balanced(code, i, "{", "}")  # an initializer: part of the statement
                continue
            end = _balanced(code, i, "{", "}")
            body = code[i + 1:end - 1]
            cls = re.search(r"\b(?:struct|class|union)\s+(?:\w+\s+)*?([A-Za-z_]\w*)\s*(?:final\s*)?(?::[^{]*)?$", h)
            if cls and "(" not in h[:cls.start(1)]:  # a class body: its statics, its constructors, `} obj;`
                name = cls.group(1)
                for m in _STATIC_MEMBER.finditer(body):
                    if "constexpr" not in m.group(1) and (what := _has_call(m.group(3).lstrip("="))):
                        yield i + 1 + m.start(), "static-initializer", \
                            f"static member {m.group(2)} initialised by {what}"
                if re.search(r"(?<![\w.>:])~?\s*" + re.escape(name) + r"\s*\(", body):
                    ctor_classes.add(name)
                semi = code.find(";", end)
                semi = n if semi < 0 else semi
                if name in ctor_classes and re.fullmatch(r"\s*[*&]?\s*[A-Za-z_]\w*\s*", code[end:semi]):
                    yield end, "static-initializer", \
                        f"an object of class {name} (which has a constructor) at namespace scope"
                i = start = min(semi + 1, n)
                continue
            if _ASM.search(head) and not re.search(r"\)\s*$", head.split("asm")[0]):
                yield start, "host-asm", "asm at namespace scope"
            fn = re.search(r"(operator\s*(?:new|delete)(?:\s*\[\s*\])?|[A-Za-z_][\w:]*)\s*\(", h)
            if depth == 0 and fn and _INTERPOSABLE.match(fn.group(1)) and not re.search(
                    r"\b(inline|static|__forceinline__|__device__|__global__)\b", h[:fn.start()]):
                yield start + len(head) - len(head.lstrip()), "symbol-interposition", \
                    f"defines the global function {' '.join(fn.group(1).split())} (shadows the library's symbol)"
            i = start = end
            continue
        i += 1


def screen_cuda(source: str, search_dirs: Sequence[Path] = (), root: Path | None = None) -> list[Finding]:
    """Every finding in a CUDA/C++ candidate, by line. An include is local when it names a file under ``root``
    found in one of ``search_dirs`` (what nvcc's -I and the original source's directory give the candidate)."""
    code, strings = _strip_cuda(source)
    findings: list[Finding] = []

    def add(rule: str, pos: int, detail: str) -> None:
        findings.append(Finding(rule, _lines_of(code, pos), detail))

    inc = _Includes(list(search_dirs), root.resolve() if root is not None else None)
    for m in re.finditer(r"^[ \t]*#[ \t]*include[ \t]*([<\"])", code, re.M):
        if m.group(1) == "<":
            end = code.find(">", m.end())
            lit = code[m.end():end] if end > 0 else ""
        else:
            lit = next((s for p, s in strings if p == m.end() - 1), "")
        base = lit.strip().split("/")[-1]
        if base == "Python.h" or lit.startswith(("pybind11", "nanobind")):
            add("python-api", m.start(), f"includes {lit}")
        elif base == "dlfcn.h":
            add("dynamic-loading", m.start(), f"includes {lit}")
        elif (p := inc.problem(lit.strip(), m.group(1) == '"')) is not None:
            add("forbidden-include", m.start(), p)
    for m in re.finditer(r"^[ \t]*#[ \t]*(include_next|import|include(?![ \t]*[<\"]))\b", code, re.M):
        add("forbidden-include", m.start(), f"#{m.group(1)} (a computed or non-standard include)")
    for m in re.finditer(r"^[ \t]*#[ \t]*pragma[ \t]+(init|fini)\b", code, re.M):
        add("static-initializer", m.start(), f"#pragma {m.group(1)}")
    for rule, names in _CALLS.items():
        for m in re.finditer(r"(?<![\w.>:])(?:::\s*|std\s*::\s*)?(" + "|".join(map(re.escape, names))
                             + r")\s*\(", code):
            commas = "," in code[m.end():_balanced(code, m.end() - 1, "(", ")")]
            if (m.group(1) == "clone" and not commas) or (m.group(1) == "remove" and commas):
                continue  # a `clone()` method, not clone(fn, stack, ...); std::remove(first, last, v), not a file
            add(rule, m.start(), f"calls {m.group(1)}")
    for rule, rx in _WORDS:
        for m in rx.finditer(code):
            add(rule, m.start(), f"uses {' '.join(m.group(0).rstrip('()').split())}")
    for pos in _host_c_linkage(code):
        add("symbol-interposition", pos, 'declares host C linkage (extern "C")')
    for pos, s in strings:
        if "/proc/" in s:
            add("file-access", pos, f"names {s!r}")
    for m in _ASM.finditer(code):  # the asm's templates: the literals inside its parentheses
        paren = re.compile(r"\s*(volatile|__volatile__|goto|inline)?\s*\(").match(code, m.end())
        end = _balanced(code, paren.end() - 1, "(", ")") if paren else m.end()
        text = " ".join(lit for p, lit in strings if m.end() <= p < end)
        if (h := _ASM_HOST.search(text)) is not None:
            add("host-asm", m.start(), f"asm with a host instruction ({h.group(0)})")
        if (py := re.search(r"\b(_?Py[A-Z_]\w*|dl(open|sym)\w*|system|fork|exec\w*)\b", text)) is not None:
            add("symbol-interposition", m.start(), f"asm naming {py.group(0)}")
    for pos, why in _pasting(code):
        add("token-pasting", pos, why)
    for pos, rule, why in _namespace_scope(code):
        add(rule, pos, why)
    return _unique(findings)


# ------------------------------------------------------------------------------------------ candidates


def cuda_search_dirs(op_dir: Path, manifest: Manifest) -> list[Path]:
    """Where a candidate replacing the op's first source finds quoted and angled includes of the op folder."""
    r = manifest.recipe
    assert isinstance(r, CudaJitRecipe)
    return [(op_dir / r.sources[0]).parent] + [op_dir / d for d in r.include_dirs]


def screen_source(source: str, op_dir: Path, manifest: Manifest) -> list[Finding]:
    """The screen for a candidate's text for this op (its kind from the recipe); [] when it may be built."""
    if isinstance(manifest.recipe, TritonRecipe):
        return screen_python(source)
    if isinstance(manifest.recipe, CudaJitRecipe):
        return screen_cuda(source, cuda_search_dirs(Path(op_dir), manifest), Path(op_dir))
    return []


def screen_report(candidate: Path, op_dir: Path, manifest: Manifest) -> BuildReport | None:
    """A failed BuildReport naming the first rule the candidate breaks, or None. The log lists every finding and
    ends with the first one, because the verdict's error line is the log's last line."""
    try:
        findings = screen_source(Path(candidate).read_text(errors="replace"), op_dir, manifest)
    except OSError as e:
        return BuildReport(ok=False, log=f"screen: unreadable: line 0 {e}")
    if not findings:
        return None
    rest = [str(f) for f in findings[1:20]]
    return BuildReport(ok=False, log="\n".join(rest + [str(findings[0])]))
