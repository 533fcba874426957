"""What a built CUDA module may call outside itself: checked on the .so, after the build and before any load.

The source screen (``screen.py``) reads the candidate's text, and text can hide a call: block-scope asm labels
built from split string literals reached ``PyRun_SimpleString`` through the screen, which joins literals with
spaces (issue 22). What a module can call is fixed by the linker instead: its undefined dynamic symbols, one
``nm -D --undefined-only`` away. A candidate whose module imports anything outside ``allowed`` is refused, one
line naming the symbol, and is never loaded by any process.

The allowlist is what the original SGLang kernels' modules and the shipped fused_add_rmsnorm patch import when
built here by the loader (tvm-ffi's wrapper and error path, iostreams for messages, the C++ ABI), widened only to
their obvious neighbours (other libm functions, other exception types, the CUDA runtime and driver API):

- the CUDA runtime and driver (``cuda*``, ``__cuda*``, ``cu[A-Z]*``);
- tvm-ffi's C API (``TVMFFI*``) and C++ API (``tvm::ffi::*``), except the global-function registry, module
  loading and symbol lookups (``REFUSED_TVMFFI``, ``tvm::ffi::Module``): a function registered from Python is a
  way back into the interpreter, and ``Module::LoadFromFile`` is a dlopen;
- the C++ runtime (operator new/delete, ``__cxa_*``, ``_Unwind_*``, strings, string streams, ``std::cerr``,
  exception types, containers' out-of-line helpers), never file streams, ``std::filesystem`` or ``std::thread``;
- from libc/libm: memory and string functions, allocation, formatting to a buffer or to stdout/stderr, math,
  ``pthread_once`` and mutexes (``std::call_once``, function-local statics), ``abort``/``__assert_fail``.

A toolchain can make honest modules import more: the H200 image's build of SGLang's own silu_and_mul carried
libstdc++ inside the module (142 imports: ``fopen64``, ``read``, ``write``, ``syscall``, ``arc4random``, iconv,
locales) and the fixed list refused SGLang's original itself (2026-12-03). So the list is relative to the
toolchain: what SGLang's own kernel imports when built here by the same recipe and flags (``toolchain_imports``)
is tolerated too, except the ``HARD_REFUSED`` core no kernel module needs on any toolchain (the Python C API,
dlopen/dlsym, process creation, signals, memory protection, sockets, thread creation, tvm-ffi's registry).

Everything else is refused: the Python C API (``Py*``, ``_Py*``), ``dlopen``/``dlsym`` (a symbol looked up at
run time is caught only because the lookup itself is refused), process creation and control (``system``,
``popen``, ``exec*``, ``fork``, ``clone``, ``ptrace``, ``prctl``, ``kill``, signals), memory protection
(``mprotect``, ``mmap``), files and sockets (``open``, ``fopen``, ``read``, ``write``, ``socket``, ``connect``),
thread creation. Not covered: a system call made by inline assembly imports no symbol (docs/harness.md).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from astra_sglang.loader.cuda_build import CudaBuildSpec

NM_TIMEOUT_S = 60

# What every module's start-up/tear-down code references (crt, the C++ ABI, unwinding), as the linker names it.
_RUNTIME = (r"__gmon_start__|_ITM_(de)?registerTMCloneTable|__cxa_\w+|_Unwind_\w+|__gxx_personality_v0"
            r"|__stack_chk_(fail|guard)|__tls_get_addr|__assert_fail|abort|__errno_location|__dso_handle")
_MEMORY = (r"mem(cpy|move|set|cmp|chr)|str(n?len|n?cmp|r?chr|str|n?cpy|n?cat|n?dup|to(u?ll?|d|f|ld))"
           r"|ato[ifl]|malloc|calloc|realloc|free|aligned_alloc|posix_memalign")
# formatting into a buffer, or onto the stdout/stderr the process already has (fopen/fdopen stay refused)
_FORMAT = r"v?s?n?printf|v?fprintf|f?puts|f?putc|putchar|fwrite|fflush|stderr|stdout"
_FORTIFIED = r"__(memcpy|memmove|memset|strn?cpy|strn?cat|v?s?n?printf|v?fprintf)_chk"
_MATH = (r"(a?(sin|cos|tan)h?|atan2|exp(2|10|m1)?|log(2|10|1p|b)?|pow|sqrt|cbrt|hypot|fabs|floor|ceil|trunc"
         r"|l{0,2}round|l{0,2}rint|nearbyint|fmod|remainder|fmin|fmax|fdim|fma|frexp|ldexp|scalbl?n|modf"
         r"|copysign|erfc?|tgamma|lgamma|nan|sincos)[fl]?|__(isnan|isinf|finite|fpclassify)[fl]?")
_PTHREAD = (r"_?_?pthread_(once|mutex_(lock|unlock|trylock|init|destroy)|key_(create|delete)|[gs]etspecific"
            r"|rwlock_\w+|cond_(wait|timedwait|signal|broadcast|init|destroy)|self|equal)")
_CUDA = r"cuda\w+|__cuda\w+|cu[A-Z]\w*"
_TVMFFI = r"TVMFFI\w+|_Z(T[VITS])?N?[KOR]{0,2}3tvm3ffi\w*"
_CXX_OPS = r"_Zn[wa][mj]\w*|_Zd[la]Pv\w*|_Z(T[VITS])?N10__cxxabiv1\w*|_ZSt(ls|rs)I\w*"
_ALLOWED_FLAT = re.compile("|".join(f"(?:{p})" for p in (_RUNTIME, _MEMORY, _FORMAT, _FORTIFIED, _MATH, _PTHREAD,
                                                          _CUDA, _TVMFFI, _CXX_OPS)))

# tvm-ffi entry points that reach functions by name: the global registry (Python registers functions there)
# and module symbol lookup (dlsym by another name). No kernel wrapper needs them.
REFUSED_TVMFFI = frozenset({"TVMFFIFunctionGetGlobal", "TVMFFIFunctionSetGlobal",
                            "TVMFFIFunctionSetGlobalFromMethodInfo", "TVMFFIEnvModLookupFromImports",
                            "TVMFFIEnvRegisterCAPI", "TVMFFIEnvModRegisterSystemLibSymbol",
                            "TVMFFIEnvModRegisterContextSymbol"})
# tvm::ffi::Module / ModuleObj: ``Module::LoadFromFile`` is dlopen, ``GetFunction`` and the import walk are dlsym
_TVMFFI_MODULE = re.compile(r"3tvm3ffi(6Module|9ModuleObj)")
# refused whatever the original imports: a way into the interpreter, into other code, or out of the process
HARD_REFUSED = re.compile(
    r"_?Py\w+|_ZN8pybind11\w*|dl(open|mopen|sym|vsym|info)|system|popen|exec[lv]\w*|fexecve|fork|vfork|clone3?"
    r"|posix_spawnp?|ptrace|prctl|kill|tgkill|signal|sigaction|raise|mprotect|pkey_mprotect|mmap(64)?|mremap"
    r"|socket|connect|bind|listen|accept4?|pthread_create|_ZNSt6thread\w*|process_vm_writev")

# std:: entities (the first name after ``std::`` / ``std::__cxx11::`` in a mangled symbol) a kernel module may use
_STD_NAMES = frozenset({
    "basic_string", "basic_ostringstream", "basic_istringstream", "basic_stringstream", "basic_stringbuf",
    "basic_ios", "ios_base", "basic_streambuf", "basic_ostream", "basic_istream", "basic_iostream", "locale",
    "ctype", "exception", "bad_alloc", "bad_cast", "bad_array_new_length", "bad_function_call", "runtime_error",
    "logic_error", "out_of_range", "invalid_argument", "length_error", "domain_error", "overflow_error",
    "underflow_error", "range_error", "nested_exception", "__exception_ptr", "rethrow_exception",
    "current_exception", "uncaught_exceptions", "terminate", "cerr", "cout", "clog", "endl", "flush", "nothrow",
    "__ostream_insert", "_Hash_bytes", "__once_callable", "__once_call", "__once_functor", "__detail"})
_STD_PREFIXES = ("__throw_", "_Rb_tree_", "_List_node_base")
_STD = re.compile(r"_Z(?:T[VITS])?N?[KOR]{0,2}St(?:7__cxx11)?(\d+)")
_STD_STREAM = re.compile(r"_Z(?:T[VITS])?N?[KOR]{0,2}S[oids]")  # std::ostream / istream / iostream / string


def allowed(symbol: str) -> bool:
    """Whether a kernel module may import ``symbol`` (its name without ``@VERSION``)."""
    if symbol in REFUSED_TVMFFI or _TVMFFI_MODULE.search(symbol):
        return False
    if _ALLOWED_FLAT.fullmatch(symbol) or _STD_STREAM.match(symbol):
        return True
    m = _STD.match(symbol)
    if m is None:
        return False
    name = symbol[m.end():m.end() + int(m.group(1))]
    return name in _STD_NAMES or name.startswith(_STD_PREFIXES)


def hard_refused(symbol: str) -> bool:
    return (symbol in REFUSED_TVMFFI or _TVMFFI_MODULE.search(symbol) is not None
            or HARD_REFUSED.fullmatch(symbol) is not None)


def undefined_symbols(so_path: Path) -> list[str]:
    """The module's undefined dynamic symbols (what it calls outside itself), versions stripped; one nm call.

    Raises OSError when nm is missing or fails: binutils is on every host that links a module (g++ calls its
    ``ld``)."""
    nm = shutil.which("nm")
    if nm is None:
        raise OSError("nm (binutils) not found on PATH")
    try:
        done = subprocess.run([nm, "-D", "--undefined-only", str(so_path)], capture_output=True, text=True,
                              timeout=NM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise OSError(f"nm took over {NM_TIMEOUT_S} s") from None
    if done.returncode != 0:
        raise OSError(f"nm failed: {(done.stderr or done.stdout).strip()[:300]}")
    return [line.split()[-1].split("@")[0] for line in done.stdout.splitlines() if line.strip()]


def refused_symbols(symbols: Iterable[str], tolerated: Iterable[str] = ()) -> list[str]:
    """The symbols outside the allowlist and outside ``tolerated`` (the toolchain's own, ``toolchain_imports``),
    hard-refused ones always; in the order given."""
    ok = {s for s in tolerated if not hard_refused(s)}
    return [s for s in symbols if not allowed(s) and s not in ok]


def imports_refusal(so_path: Path, tolerated: Iterable[str] = ()) -> str | None:
    """None when the built module imports only allowed (or ``tolerated``) symbols; else the verdict's one line,
    naming the first and counting the rest. A module whose imports cannot be listed is refused too: unchecked, it
    must not be loaded."""
    try:
        bad = refused_symbols(undefined_symbols(so_path), tolerated)
    except OSError as e:
        return f"refused: cannot list the built module's imports ({e})"
    if not bad:
        return None
    more = f" and {len(bad) - 1} more ({', '.join(bad[1:4])}{', ...' if len(bad) > 4 else ''})" if len(bad) > 1 else ""
    return (f"refused: the built module imports {bad[0]}{more} (a kernel module may import only the CUDA runtime, "
            "tvm-ffi, the C/C++ runtime and what SGLang's own kernel imports when built here; see docs/harness.md)")


def toolchain_imports(spec: CudaBuildSpec) -> frozenset[str]:
    """What SGLang's own kernel imports when this toolchain builds it from the same recipe, flags and dtype (the
    candidate's spec with the candidate taken out; usually already in the build cache). Empty when it does not
    build: then nothing beyond the fixed allowlist is tolerated."""
    from astra_sglang.errors import AstraError

    try:
        built = dataclasses.replace(spec, kernel_source=None).build(load=False)
        return frozenset(undefined_symbols(built.so_path))
    except (AstraError, OSError):
        return frozenset()


def check_module(spec: CudaBuildSpec, so_path: Path) -> str | None:
    """``imports_refusal`` against the fixed allowlist first; only a module that fails it is checked again with
    what the original imports on this toolchain tolerated (one more build, cached, and only then)."""
    refusal = imports_refusal(so_path)
    if refusal is None or spec.kernel_source is None:
        return refusal
    tolerated = toolchain_imports(spec)
    return imports_refusal(so_path, tolerated) if tolerated else refusal
