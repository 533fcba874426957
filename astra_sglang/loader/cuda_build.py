"""Build an extracted CUDA JIT kernel stand-alone: SGLang's ``load_jit`` restated without SGLang.

The generated ``cuda.cu``, the ninja file, the nvcc flags and the link line are the ones SGLang 0.5.23 writes
on sm_90 (``sglang/kernels/jit/utils/compile/{spec,ninja,toolchain}.py``), so a kernel measured here is the
kernel SGLang would build. ``-Xptxas=-v`` is always on: the per-kernel resource report is the cheapest
feedback an optimizer gets, and it needs no GPU.

Cache: an entry directory per (module, sha256 of cuda.cu + build.ninja + sources + nvcc + tvm-ffi version),
holding the .so, the full compiler log, the ptxas report and the header closure nvcc actually read (from its
depfile) with their hashes; a hit is only a hit if every one of those headers is unchanged. Builds go to a
staging directory and are published by rename, so a concurrent reader sees a complete entry or none.

What to build is one frozen, hashable ``CudaBuildSpec`` (FlashInfer's JitSpec is the model), made from the op's
recipe for one dtype, optionally with a candidate's source in place of the recipe's first one; ``build_batch``
builds many at once (nvcc in threads). Everyone who builds (the harness, the plugin, the launcher) goes
through it, so a kernel is built one way.

Failure: ``CudaBuildSpec.build`` raises ``BuildError`` (an AstraError carrying the BuildReport with the
compiler's message); it never returns a report with ``ok=False``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from astra_sglang.contract.base import sha256_file
from astra_sglang.contract.op import CudaJitRecipe, Manifest
from astra_sglang.contract.result import BuildReport
from astra_sglang.data_paths import CACHE_ENV
from astra_sglang.errors import AstraError
from astra_sglang.loader import toolchain
from astra_sglang.loader.ptxas import parse_ptxas, resource_lines
from astra_sglang.platform_info import gencode

BUILD_TIMEOUT_S = 900
_LOG_LIMIT = 20000

# What tvm-ffi's _decorate_with_tvm_ffi (and SGLang's spec._FFI_INCLUDES) prepend to every generated unit.
_FFI_INCLUDES = (
    "#include <tvm/ffi/container/tensor.h>",
    "#include <tvm/ffi/dtype.h>",
    "#include <tvm/ffi/error.h>",
    "#include <tvm/ffi/extra/c_env_api.h>",
    "#include <tvm/ffi/function.h>",
)
# SGLang's get_default_target_flags() on CUDA, after the -DSGL_CUDA_ARCH define.
_DEFAULT_CUDA_FLAGS = ("-std=c++20", "-O3", "--expt-relaxed-constexpr")
_ARCH_FLAG = re.compile(r"^(-gencode|--generate-code|-arch|--gpu-architecture|-code|-DSGL_CUDA_ARCH=)")


class BuildError(AstraError):
    """The compiler or linker failed; ``report.log`` holds its message."""

    def __init__(self, message: str, report: BuildReport):
        super().__init__(message)
        self.report = report


@dataclass
class BuiltModule:
    module: Any  # tvm_ffi.Module, None when load=False
    so_path: Path
    report: BuildReport
    build_dir: Path
    exports: list[str] = field(default_factory=list)


def cuda_flags(recipe_flags: list[str], arch: str) -> list[str]:
    """Device flags in SGLang's order: -Xcompiler -fPIC, -gencode, -DSGL_CUDA_ARCH, defaults, the recipe's extras.

    Arch flags in the recipe are replaced by the requested arch so one manifest builds for any target.
    """
    target, sgl_arch = gencode(arch)
    flags = ["-Xcompiler", "-fPIC", f"-gencode=arch=compute_{target},code=sm_{target}", f"-DSGL_CUDA_ARCH={sgl_arch}"]
    extras = [f for f in recipe_flags if not _ARCH_FLAG.match(f) and f != "-Xptxas=-v"]
    flags += [f for f in _DEFAULT_CUDA_FLAGS if f not in extras]
    flags += extras
    flags.append("-Xptxas=-v")
    return flags


def wrapper_source(sources: list[Path], exports: list[tuple[str, str]]) -> str:
    lines = list(_FFI_INCLUDES)
    lines += [f'#include "{p}"' for p in sources]
    lines.append("namespace sglang {")
    lines += [f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({name}, ({symbol}));" for name, symbol in exports]
    lines.append("}  // namespace sglang")
    return "\n".join(lines) + "\n"


def _ninja_file(module_name: str, nvcc: str, cxx: str, cflags: list[str], ldflags: list[str]) -> str:
    q = [_quote(f) for f in cflags]
    lq = [_quote(f) for f in ldflags]
    return "\n".join([
        "ninja_required_version = 1.3",
        f"cxx = {shlex.quote(cxx)}",
        f"nvcc = {shlex.quote(nvcc)}",
        f"cudaflags = {' '.join(q)}",
        f"ldflags = {' '.join(lq)}",
        "",
        "rule compile_cuda",
        "  depfile = $out.d",
        '  command = $nvcc -MD -MF "$out.d" $cudaflags -c "$in" -o "$out"',
        "",
        "rule link",
        '  command = $cxx $in $ldflags -o "$out"',
        "",
        "build cuda_0.o: compile_cuda cuda.cu",
        "",
        f"build {module_name}.so: link cuda_0.o",
        "",
        f"default {module_name}.so",
        "",
    ])


def _quote(flag: str) -> str:
    for prefix in ("-I", "-L"):
        if flag.startswith(prefix) and len(flag) > 2:
            return prefix + shlex.quote(flag[2:]).replace("$", "$$")
    return flag.replace("$", "$$")



def default_cache_dir(op_dir: Path) -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path(op_dir) / "build"


def _cuda_recipe(manifest: Manifest, recipe: CudaJitRecipe | None) -> CudaJitRecipe:
    r = recipe if recipe is not None else manifest.recipe
    if not isinstance(r, CudaJitRecipe):
        raise AstraError(f"{manifest.short_name}: not a CUDA JIT op (recipe kind {r.kind!r})")
    return r


def _resolve(op_dir: Path, rel: str, what: str) -> Path:
    p = (op_dir / rel).resolve()
    if not p.exists():
        raise AstraError(f"{what} {p} is missing: run `astra-sglang extract` to regenerate the folder")
    return p


@dataclass(frozen=True)
class CudaBuildSpec:
    """Every input of one module build: the cache key hashes all of it plus the files' bytes and the toolchain."""

    module_name: str  # recipe module name + dtype, a valid C identifier
    op_dir: Path
    sources: tuple[Path, ...]  # the recipe's sources, resolved; kernel_source replaces the first
    include_dirs: tuple[Path, ...]
    exports: tuple[tuple[str, str], ...]  # (export name, C++ symbol with the dtype's template arguments)
    entry: str
    dtype: str
    template_args: str
    cflags: tuple[str, ...]  # the recipe's cuda_cflags (arch flags are replaced by ``arch``)
    ldflags: tuple[str, ...]  # the recipe's extra ldflags
    arch: str
    kernel_source: Path | None = None
    cache_dir: Path | None = None

    @classmethod
    def from_recipe(cls, op_dir: Path, manifest: Manifest, dtype: str, *, recipe: CudaJitRecipe | None = None,
                    kernel_source: Path | None = None, arch: str = "sm_90a",
                    cache_dir: Path | None = None) -> CudaBuildSpec:
        """The op's recipe (or a baseline's ``recipe`` from the same folder) for one dtype.

        Raises AstraError for a dtype, source or include dir the folder does not have.
        """
        op_dir = Path(op_dir).resolve()
        r = _cuda_recipe(manifest, recipe)
        if dtype not in r.template_args:
            raise AstraError(f"{manifest.short_name}: no template arguments for dtype {dtype!r} "
                             f"(manifest has {sorted(r.template_args)})")
        if not r.sources:
            raise AstraError(f"{manifest.short_name}: recipe lists no sources")
        sources = tuple(_resolve(op_dir, s, "kernel source") for s in r.sources)
        ks = None
        if kernel_source is not None:
            ks = Path(kernel_source).resolve()
            if not ks.is_file():
                raise AstraError(f"candidate source {ks} does not exist")
        targs = r.template_args[dtype]
        exports = tuple((e.name, e.symbol.replace("{targs}", targs)) for e in r.exports)
        if r.entry not in {n for n, _ in exports}:
            raise AstraError(f"{manifest.short_name}: entry {r.entry!r} is not among the exports")
        return cls(
            module_name=re.sub(r"\W", "_", r.module_name) + "_" + re.sub(r"\W", "_", dtype),
            op_dir=op_dir,
            sources=sources,
            include_dirs=tuple(_resolve(op_dir, d, "include dir") for d in r.include_dirs),
            exports=exports,
            entry=r.entry,
            dtype=dtype,
            template_args=targs,
            cflags=tuple(r.cuda_cflags),
            ldflags=tuple(r.ldflags),
            arch=arch,
            kernel_source=ks,
            cache_dir=Path(cache_dir) if cache_dir is not None else None,
        )

    def build(self, load: bool = False) -> BuiltModule:
        """Build (or reuse) the module; ``load`` also loads it with tvm-ffi (needs a CUDA driver at call time)."""
        sources = [self.kernel_source, *self.sources[1:]] if self.kernel_source is not None else list(self.sources)
        nvcc = str(toolchain.nvcc_path())
        cxx = toolchain.host_compiler()
        ninja = toolchain.ninja_path()
        ffi_include, ffi_lib = toolchain.tvm_ffi_paths()
        cflags = cuda_flags(list(self.cflags), self.arch) + [f"-I{ffi_include}"] + [f"-I{d}" for d in self.include_dirs]
        ldflags = ["-shared", f"-L{ffi_lib}", "-ltvm_ffi", f"-L{toolchain.cuda_home() / 'lib64'}", "-lcudart"]
        ldflags += list(self.ldflags)
        cuda_cu = wrapper_source(sources, list(self.exports))
        ninja_text = _ninja_file(self.module_name, nvcc, cxx, cflags, ldflags)

        h = hashlib.sha256()
        for part in (cuda_cu, ninja_text, self.arch, self.template_args, toolchain.nvcc_version(),
                     toolchain.tvm_ffi_version()):
            h.update(part.encode() + b"\0")
        for s in sources:
            h.update(Path(s).read_bytes() + b"\0")
        key = h.hexdigest()
        root = self.cache_dir if self.cache_dir is not None else default_cache_dir(self.op_dir)
        entry = root / f"{self.module_name}_{key[:16]}"
        so_path = entry / f"{self.module_name}.so"

        with _lock(root, entry.name):
            cached = _valid_entry(entry, so_path)
            if cached is not None:
                report = cached
                report.cached = True
            else:
                try:
                    report = _build(entry, self.module_name, cuda_cu, ninja_text, ninja, key)
                except OSError as e:  # the sandboxed worker: it loads what the parent built, never builds
                    if not _not_writable(e):
                        raise
                    raise AstraError(f"{self.module_name}: not built yet and {root} is not writable here ({e}); the "
                                     "harness builds every CUDA module before its worker starts") from None
        module = _load(so_path) if load else None
        return BuiltModule(module=module, so_path=so_path, report=report, build_dir=entry,
                           exports=[n for n, _ in self.exports])

    def build_and_load(self) -> BuiltModule:
        return self.build(load=True)


def build_batch(specs: Sequence[CudaBuildSpec], *, load: bool = False,
                max_workers: int | None = None) -> list[BuiltModule | AstraError]:
    """Build every spec, nvcc in parallel threads; one outcome per spec, in order: the module or its error.

    A candidate's build is most of its evaluation time on a many-core GPU host, and N server processes that
    build the same spec wait on one another's build (the cache entry's lock) instead of repeating it.
    """
    def one(spec: CudaBuildSpec) -> BuiltModule | AstraError:
        try:
            return spec.build(load=load)
        except AstraError as e:
            return e

    workers = max_workers or min(len(specs), os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(one, specs))


def build_cuda_module(
    op_dir: Path,
    manifest: Manifest,
    dtype: str,
    *,
    kernel_source: Path | None = None,
    cache_dir: Path | None = None,
    arch: str = "sm_90a",
    load: bool = True,
    recipe: CudaJitRecipe | None = None,
) -> BuiltModule:
    """One spec from the recipe, built: ``CudaBuildSpec.from_recipe(...).build(load)``."""
    spec = CudaBuildSpec.from_recipe(op_dir, manifest, dtype, recipe=recipe, kernel_source=kernel_source,
                                     arch=arch, cache_dir=cache_dir)
    return spec.build(load=load)


def _build(entry: Path, module_name: str, cuda_cu: str, ninja_text: str, ninja: str, key: str) -> BuildReport:
    staging = entry.parent / f".staging-{entry.name}-{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    try:
        (staging / "cuda.cu").write_text(cuda_cu)
        (staging / "build.ninja").write_text(ninja_text)
        t0 = time.monotonic()
        try:
            done = subprocess.run([ninja, "-f", "build.ninja"], cwd=staging, capture_output=True, text=True,
                                  timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            report = BuildReport(ok=False, seconds=time.monotonic() - t0, log=f"build timed out after {BUILD_TIMEOUT_S} s")
            raise BuildError(f"{module_name}: {report.log}", report) from None
        seconds = time.monotonic() - t0
        log = (done.stdout or "") + (done.stderr or "")
        if done.returncode != 0:
            msg = _compiler_message(log)
            report = BuildReport(ok=False, seconds=seconds, log=msg)
            raise BuildError(f"{module_name}: build failed\n{msg}", report)
        report = BuildReport(ok=True, seconds=seconds, log=_trim(log), resources=parse_ptxas(log))
        (staging / "build.log").write_text(log)
        (staging / "ptxas_report.txt").write_text(resource_lines(log))
        deps = _depfile_hashes(staging / "cuda_0.o.d")
        (staging / "deps.json").write_text(json.dumps({"key": key, "deps": deps}, indent=1))
        (staging / "report.json").write_text(report.model_dump_json(indent=1))
        if entry.exists():
            old = entry.parent / f".old-{entry.name}-{uuid.uuid4().hex[:8]}"
            entry.rename(old)
            shutil.rmtree(old, ignore_errors=True)
        staging.rename(entry)
        return report
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _compiler_message(log: str) -> str:
    """The compiler's own words, without ninja's echo of the (very long) command lines."""
    lines = [ln for ln in log.splitlines() if not ln.startswith("[") and not ln.startswith("FAILED:")
             and "ninja: build stopped" not in ln]
    errors = [ln for ln in lines if "error" in ln.lower()]
    body = "\n".join(lines).strip() or log.strip()
    if errors and len(body) > _LOG_LIMIT:
        body = "\n".join(errors)
    return _trim(body)


def _trim(text: str) -> str:
    return text if len(text) <= _LOG_LIMIT else text[:_LOG_LIMIT // 2] + "\n...[trimmed]...\n" + text[-_LOG_LIMIT // 2:]


def _depfile_hashes(depfile: Path) -> dict[str, str]:
    """Every file nvcc read (its -MD depfile), hashed, so an edited header invalidates the entry."""
    if not depfile.exists():
        return {}
    text = depfile.read_text().replace("\\\n", " ")
    _, _, prereqs = text.partition(":")
    tokens = re.findall(r"(?:\\ |[^\s])+", prereqs)
    out: dict[str, str] = {}
    for tok in tokens:
        p = Path(tok.replace("\\ ", " "))
        if p.name == "cuda.cu" or not p.is_absolute() or not p.exists():
            continue
        out[str(p)] = sha256_file(p)
    return out


def _valid_entry(entry: Path, so_path: Path) -> BuildReport | None:
    try:
        deps = json.loads((entry / "deps.json").read_text())["deps"]
        report = BuildReport.model_validate_json((entry / "report.json").read_text())
    except (OSError, ValueError, KeyError):
        return None
    if not so_path.exists():
        return None
    for path, sha in deps.items():
        p = Path(path)
        if not p.exists() or sha256_file(p) != sha:
            return None
    return report


def _not_writable(e: OSError) -> bool:
    """Whether ``e`` says "you may not write here". Landlock answers EACCES, but the GPU sandbox's read-only
    mounts answer EROFS, which is no PermissionError: treating only the latter as "load, don't build" failed every
    CUDA candidate's build on the H100 (2026-12-05)."""
    return e.errno in (errno.EACCES, errno.EPERM, errno.EROFS)


@contextlib.contextmanager
def _lock(root: Path, name: str) -> Iterator[None]:
    """One build per entry across processes and threads (flock on separate opens excludes threads too).

    A process that may not write the cache (the harness's sandboxed worker, loading what the parent built) takes
    the lock through a read-only open where the lock file exists (flock needs no write access), else none: it
    can only load, and a missing entry fails its build with PermissionError."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(root / f".{name}.lock", os.O_CREAT | os.O_RDWR, 0o644)
    except OSError as e:
        if not _not_writable(e):
            raise
        try:
            fd = os.open(root / f".{name}.lock", os.O_RDONLY)
        except OSError:
            yield
            return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _load(so_path: Path) -> Any:
    try:
        import tvm_ffi
    except ImportError:
        raise AstraError("apache-tvm-ffi is not installed: `pip install apache-tvm-ffi==0.1.11`") from None
    try:
        return tvm_ffi.load_module(str(so_path.resolve()))
    except Exception as e:
        raise AstraError(f"cannot load {so_path}: {e}") from None
