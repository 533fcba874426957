"""``extract OP ...``: write one self-contained folder per op, atomically.

Generic work lives here (copying sources with their include closure, hashing, capturing the JIT recipe,
scanning call sites); the op-specific knowledge comes from the catalog entry. A folder is assembled in a
temporary sibling directory and renamed into place only once its manifest validates, so a failure never
leaves a half-written folder (and never destroys the previous good one). Re-extracting replaces only extract's
own unchanged files: anything else in the folder is carried over (see ``keep``).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from astra_sglang.contract.base import make_temp_dir
from astra_sglang.contract.base import sha256_file as sha256
from astra_sglang.contract.op import (
    MANIFEST_NAME,
    Baseline,
    CudaExport,
    CudaJitRecipe,
    FileRole,
    Inputs,
    Manifest,
    PyClosure,
    PyModule,
    Reference,
    ShapeCase,
    SourceFile,
    TritonRecipe,
    canonical_op_id,
    load_manifest,
    write_manifest,
)
from astra_sglang.contract.restore import backup_path
from astra_sglang.errors import AstraError
from astra_sglang.extract import catalog
from astra_sglang.extract.callsites import scan_call_sites
from astra_sglang.extract.catalog.base import CatalogEntry, FlashInferBaseline
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.closure import include_closure
from astra_sglang.extract.discovery import SERVING_ENTRY_POINTS, list_ops, resolve, triton_module
from astra_sglang.extract.keep import carry, files_under, summarize
from astra_sglang.extract.py_closure import PyClosureResult, python_closure
from astra_sglang.extract.recipe import (
    capture_jit_request,
    resolve_target,
    sm90_cuda_cflags,
    sm90_ldflags,
)
from astra_sglang.extract.sglang_env import (
    flashinfer_root,
    flashinfer_version,
    import_optional,
    jit_dir,
    sglang_root,
    sglang_version,
)
from astra_sglang.extract.source_scan import module_file, scan_module

GLUE_DIR = Path(__file__).parent / "glue"
ARCH = "sm_90a"
TOOLCHAIN_NOTE = (
    "cuda_cflags are SGLang's BuildSpec.cuda_cflags on sm_90 (default target flags + the builder's extras); the "
    "toolchain adds '-Xcompiler -fPIC', '-gencode=arch=compute_90a,code=sm_90a' and -I for tvm-ffi's include dir "
    "and include_dirs, and links with '-shared -L<tvm_ffi>/lib -ltvm_ffi -L<cuda>/lib64 -lcudart'"
)


class _Folder:
    """Files being assembled in a temporary op folder, each recorded with its hash and role."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: list[SourceFile] = []

    def copy(self, src: Path, rel: str, origin: str, role: FileRole, committed: bool) -> str:
        dest = self.root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        self.files.append(SourceFile(path=rel, origin=origin, sha256=sha256(dest), role=role, committed=committed))
        return rel

    def write(self, rel: str, source: FileText, role: FileRole) -> str:
        dest = self.root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(source.text())
        self.files.append(SourceFile(path=rel, origin="astra", sha256=sha256(dest), role=role, committed=True))
        return rel

    def copy_sglang(self, src: Path, role: FileRole) -> str:
        rel_pkg = src.resolve().relative_to(sglang_root()).as_posix()
        if any(f.path == f"src/{rel_pkg}" for f in self.files):
            return f"src/{rel_pkg}"
        return self.copy(src, f"src/{rel_pkg}", f"sglang:{rel_pkg}", role, committed=False)


def _template_args(symbol: str) -> str:
    """The text inside the first balanced <...> of a C++ symbol ('K<bf16_t, true>::run' -> 'bf16_t, true')."""
    start = symbol.find("<")
    if start < 0:
        return ""
    depth = 0
    for i in range(start, len(symbol)):
        depth += {"<": 1, ">": -1}.get(symbol[i], 0)
        if depth == 0:
            return symbol[start + 1 : i]
    raise AstraError(f"cannot parse the template arguments of {symbol!r}")


def _cuda_jit(entry: CatalogEntry, folder: _Folder, external: list[str], notes: list[str]) -> CudaJitRecipe:
    assert entry.builder and entry.entry_export
    requests = {d: capture_jit_request(entry.builder, a, entry.builder_kwargs) for d, a in entry.builder_args.items()}
    first_dtype, first = next(iter(requests.items()))
    if first.extra_dependencies or not first.header_only:
        raise AstraError(f"{entry.short_name}: needs {first.extra_dependencies or 'a non-header-only build'}; "
                         "only header-only JIT modules without external dependencies can be extracted")
    targs = {d: _template_args(r.cuda_wrappers[0][1]) for d, r in requests.items()}
    exports = [CudaExport(name=n, symbol=s.replace(f"<{targs[first_dtype]}>", "<{targs}>", 1))
               for n, s in first.cuda_wrappers]
    for dtype, req in requests.items():
        rendered = [(e.name, e.symbol.replace("{targs}", targs[dtype])) for e in exports]
        if rendered != [tuple(w) for w in req.cuda_wrappers] or req.cuda_files != first.cuda_files \
                or req.extra_cuda_cflags != first.extra_cuda_cflags:
            raise AstraError(f"{entry.short_name}: SGLang's {dtype} build differs beyond template arguments")
    if entry.entry_export not in [e.name for e in exports]:
        raise AstraError(f"{entry.short_name}: export {entry.entry_export!r} not among {[e.name for e in exports]}")
    csrc, include = jit_dir() / "csrc", jit_dir() / "include"
    roots = [Path(f) if Path(f).is_absolute() else csrc / f for f in first.cuda_files]
    missing = [str(r) for r in roots if not r.is_file()]
    if missing:
        raise AstraError(f"{entry.short_name}: JIT source not found in the installed SGLang: {missing[0]}")
    extra_inc = [Path(p) for p in first.extra_include_paths]
    closure = include_closure(roots, [include, *extra_inc], within=[jit_dir()])
    sources = []
    for path in closure.files:
        rel = folder.copy_sglang(path, "kernel" if path in [r.resolve() for r in roots] else "header")
        if path in [r.resolve() for r in roots]:
            sources.append(rel)
    external += [e for e in closure.external if e not in external]
    notes.append(f"recipe captured from SGLang's {entry.builder} with load_jit recorded on sm_90 "
                 f"(module args {list(first.module_args)})")
    notes.append(TOOLCHAIN_NOTE)
    return CudaJitRecipe(
        module_name=first.module_args[0],
        sources=sources,
        include_dirs=[f"src/{include.relative_to(sglang_root()).as_posix()}"],
        template_args=targs,
        exports=exports,
        entry=entry.entry_export,
        call=list(entry.call),
        cuda_cflags=sm90_cuda_cflags(first.extra_cuda_cflags),
        ldflags=sm90_ldflags(first.extra_ldflags),
        arch=ARCH,
    )


def _vendor_closure(result: PyClosureResult, folder: _Folder) -> PyClosure | None:
    """Copy every module of the closure into src/ (pinned like the CUDA headers); None for a lone module."""
    if len(result.modules) == 1 and not result.lazy_missing:
        return None
    modules = []
    for i, (name, plan) in enumerate(result.modules.items()):
        scan = scan_module(name)
        role: FileRole = "kernel" if i == 0 or (scan is not None and scan.triton_kernels) else "launcher"
        rel = folder.copy_sglang(plan.path, role)
        modules.append(PyModule(name=name, path=rel, keep_lines=plan.keep_lines, import_subset=plan.import_subset,
                                left_out=plan.left_out))
    return PyClosure(modules=modules, lazy_missing=list(result.lazy_missing))


def _triton(entry: CatalogEntry, folder: _Folder) -> TritonRecipe:
    assert entry.wrapper
    module, _, wrapper = entry.wrapper.partition(":")
    scan = scan_module(module)
    path = module_file(module)
    if scan is None or path is None:
        raise AstraError(f"{entry.short_name}: Triton module {module} not found in the installed SGLang")
    if scan.error:
        raise AstraError(f"{entry.short_name}: {scan.error}")
    if wrapper not in scan.functions or not scan.triton_kernels:
        raise AstraError(f"{entry.short_name}: {path.name} has no wrapper {wrapper!r} with @triton.jit kernels")
    result = python_closure(module)
    if result.refusal:
        raise AstraError(f"{entry.short_name}: the SGLang imports of {path.name} cannot be vendored: {result.refusal}")
    rel = folder.copy_sglang(path, "kernel")
    closure = _vendor_closure(result, folder)
    adapter = f"{folder.write('adapter.py', entry.adapter, 'glue')}:call" if entry.adapter else None
    unknown = sorted(set(entry.tuned_kernels) - set(scan.triton_kernels))
    if unknown:
        raise AstraError(f"{entry.short_name}: tuned kernels {unknown} are not @triton.jit kernels of {path.name}")
    return TritonRecipe(source=rel, wrapper=wrapper, kernels=list(scan.triton_kernels), call=list(entry.call),
                        closure=closure, adapter=adapter, tuned=list(entry.tuned_kernels) or None,
                        config_space=entry.config_space, config_arg=entry.config_arg)


@dataclass
class VendoredSources:
    """An op's Triton source with its SGLang closure, copied into a folder, for drafting a contract."""

    op_id: str
    module: str | None = None  # the SGLang module holding the @triton.jit kernels
    wrapper: str | None = None  # its launch wrapper, when the op's target names a top-level function
    kernels: list[str] = field(default_factory=list)
    source: str | None = None  # the module's copy, relative to the folder
    files: list[SourceFile] = field(default_factory=list)  # every copied file, pinned (for Manifest.files)
    closure: PyClosure | None = None  # for TritonRecipe.closure; None when the source imports no SGLang module
    package: str | None = None  # the private package the loader imports the closure under, from this folder
    refusal: str | None = None  # why nothing was vendored


def _op_target(op_id: str) -> str | None:
    """The Triton backend target ('module:attr') of a registry op id, catalog entry or 'module:attr'."""
    entry = catalog.find(op_id)
    if entry is not None and entry.wrapper:
        return entry.wrapper
    if ":" in op_id:
        return op_id
    from astra_sglang.extract.sglang_env import require_sglang

    require_sglang()
    from sglang.kernels.registry import registry

    found = next((s.target for s in registry.all_specs() if s.op == op_id and s.backend.value == "triton"), None)
    if found is None:  # an entry point SGLang does not register, named by its op id
        found = next((t for t in SERVING_ENTRY_POINTS if canonical_op_id(t) == op_id), None)
    return found


def vendor_triton_sources(op_id: str, dest: Path) -> VendoredSources:
    """Copy the Triton source of ``op_id`` and the SGLang modules it needs into ``dest`` (no catalog entry
    needed); a refusal line instead when there is no Triton source or its imports cannot be vendored."""
    done = VendoredSources(op_id=op_id)
    target = _op_target(op_id)
    found = triton_module(target) if target else None
    if found is None:
        done.refusal = f"{op_id}: no Triton backend with @triton.jit kernels"
        return done
    done.module, done.wrapper = found
    result = python_closure(done.module)
    if result.refusal:
        done.refusal = f"{op_id}: the SGLang imports of {done.module} cannot be vendored: {result.refusal}"
        return done
    folder = _Folder(Path(dest))
    path = result.modules[done.module].path
    done.source = folder.copy_sglang(path, "kernel")
    done.closure = _vendor_closure(result, folder)
    scan = scan_module(done.module)
    done.kernels = list(scan.triton_kernels) if scan else []
    done.files = folder.files
    if done.closure is not None:
        done.package = done.closure.package_name(Path(dest), Path(dest) / done.source)
    return done


def _flashinfer(base: FlashInferBaseline, folder: _Folder, external: list[str]) -> Baseline:
    root = flashinfer_root()
    if root is None:
        raise AstraError("flashinfer-python is not installed; it provides the baseline kernel SGLang serves with "
                         "(pip install flashinfer-python==0.7.2 --no-deps)")
    include = root / "data" / "include"
    header = include / base.header
    if not header.is_file():
        raise AstraError(f"the installed flashinfer-python has no {base.header}")
    glue = GLUE_DIR / base.glue
    closure = include_closure([glue, header], [include], within=[include])
    for path in closure.files:
        if not path.is_relative_to(include.resolve()):
            continue  # the glue itself, copied below
        rel = path.relative_to(include).as_posix()
        if not any(f.path == f"baseline_src/include/{rel}" for f in folder.files):
            role: FileRole = "baseline_kernel" if path == header.resolve() else "baseline_header"
            folder.copy(path, f"baseline_src/include/{rel}", f"flashinfer:data/include/{rel}", role, committed=False)
    stubs = [s for s in sorted((GLUE_DIR / "stubs").iterdir()) if s.name in closure.external]
    for stub in stubs:
        if not any(f.path == f"glue/stubs/{stub.name}" for f in folder.files):
            folder.copy(stub, f"glue/stubs/{stub.name}", "astra", "glue", committed=True)
    source = folder.copy(glue, f"glue/{base.glue}", "astra", "glue", committed=True)
    external += [e for e in closure.external if e not in external and e not in {s.name for s in stubs}]
    recipe = CudaJitRecipe(
        module_name=base.name,
        sources=[source],
        include_dirs=(["glue/stubs"] if stubs else []) + ["baseline_src/include"],
        template_args=dict(base.template_args),
        exports=[CudaExport(name=n, symbol=s) for n, s in base.exports],
        entry=base.entry,
        call=list(base.call),
        cuda_cflags=sm90_cuda_cflags([]),
        ldflags=sm90_ldflags([]),
        arch=ARCH,
    )
    return Baseline(name=base.name, description=base.description, when=base.when, recipe=recipe,
                    same_function=base.same_function, note=base.note, serves=list(base.serves))


def _kept_traced(old_dir: Path, op_id: str) -> list[ShapeCase]:
    """Traced shapes of a folder being re-extracted survive: they came from a workload, not from SGLang."""
    try:
        old = load_manifest(old_dir)
    except Exception:
        return []
    same = canonical_op_id(old.op_id) == op_id  # a folder written before the one op-id form is the same op
    return [s for s in old.shapes if "traced" in s.tags] if same else []


def import_catalog_sites() -> None:
    """Import every module any catalog entry scans for call sites, before a scan.

    The scan reads ``sys.modules``, so without this an op's call sites depended on which other ops were extracted
    in the same process (``per_token_group_quant_fp8`` alone missed the binding in ``moe_runner.deep_gemm`` that
    an ``extract`` of every op found): re-extracting must give the same manifest whatever else is extracted."""
    for module in sorted({m for e in catalog.entries() for m in e.callsite_modules}):
        import_optional(module)


def build_manifest(entry: CatalogEntry, root: Path, kept_shapes: list[ShapeCase]) -> Manifest:
    from astra_sglang.extract.sglang_env import install_cpu_shims

    install_cpu_shims()  # the entry's SGLang module is imported below; srt.layers needs torchvision's stand-in
    folder = _Folder(root)
    external: list[str] = []
    notes: list[str] = []
    recipe = _cuda_jit(entry, folder, external, notes) if entry.kind == "cuda_jit" else _triton(entry, folder)
    baselines = list(entry.baselines) + [_flashinfer(b, folder, external) for b in entry.flashinfer_baselines]
    ref = folder.write("reference.py", entry.reference, "reference")
    inputs = None
    if entry.inputs is not None:
        inputs = Inputs(path=folder.write("inputs.py", entry.inputs, "inputs"),
                        scalars_function="scalars" if entry.inputs_scalars else None)
    elif any(t.generated for t in entry.signature.tensors):
        raise AstraError(f"{entry.short_name}: the signature has generated tensors but the entry has no inputs.py")
    obj = resolve_target(entry.entry_point)
    import_catalog_sites()
    call_sites, skipped = scan_call_sites(obj, entry.entry_point, entry.callsite_modules, entry.serving_sites,
                                            entry.extra_sites)
    if skipped:
        notes.append(f"call-site scan: modules that do not import on this host were read from source: {skipped}")
    shapes = entry.shapes()
    known = {tuple(sorted(s.dims.items())) for s in shapes}
    shapes += [s for s in kept_shapes if tuple(sorted(s.dims.items())) not in known]
    return Manifest(
        op_id=entry.op_id,
        short_name=entry.short_name,
        sglang_version=sglang_version(),
        flashinfer_version=flashinfer_version() if entry.flashinfer_baselines else None,
        source_kind=entry.kind,
        entry_point=entry.entry_point,
        files=folder.files,
        recipe=recipe,
        signature=entry.signature,
        reference=Reference(
            path=ref,
            origin=f"forward_native:{entry.forward_native}" if entry.forward_native else "written",
            forward_native=entry.forward_native,
        ),
        tolerances=dict(entry.tolerances),
        baselines=baselines,
        call_sites=call_sites,
        shapes=shapes,
        notes=[*entry.notes, *notes],
        external_includes=external,
        inputs=inputs,
        provenance=entry.provenance,
        findings=list(entry.findings),
    )


@dataclass
class WrittenOp:
    path: Path
    kept: list[str] = field(default_factory=list)  # files extract did not write, carried over
    backups: list[str] = field(default_factory=list)  # edited copies of extract's files, kept beside the new ones

    def note(self) -> str:
        parts = []
        if self.kept:
            parts.append(f"kept {len(self.kept)} file(s) extract did not write: {summarize(self.kept)}")
        if self.backups:
            parts.append(f"you had edited {len(self.backups)} of its file(s); kept as {', '.join(self.backups)}")
        return "; ".join(parts)


def _carry_over(final: Path, tmp: Path) -> WrittenOp:
    """Into the new folder: every file of the old one that extract did not write, and a backup of each of its
    files the user edited (hash differs from the old manifest). Extract's own unchanged files are replaced."""
    try:
        own = {f.path: f.sha256 for f in load_manifest(final).files}
    except Exception:  # not an op folder (or an unreadable one): every file in it is the user's
        own = {}
    done = WrittenOp(path=final)
    for path in files_under(final):
        rel = path.relative_to(final).as_posix()
        if rel == MANIFEST_NAME and own:
            continue  # regenerated; its traced shapes are carried by _kept_traced
        if rel in own:
            if not path.is_symlink() and sha256(path) == own[rel]:
                continue
            dest = backup_path(tmp / rel)
            done.backups.append(dest.relative_to(tmp).as_posix())
        else:
            dest = tmp / rel if not (tmp / rel).exists() else backup_path(tmp / rel)
            done.kept.append(rel)
        carry(path, dest)
    return done


def write_op(entry: CatalogEntry, out: Path) -> WrittenOp:
    """Assemble the folder in a temporary sibling, then swap it in; the old folder survives any failure."""
    if out.exists() and not out.is_dir():
        raise AstraError(f"--out {out} is a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise AstraError(f"cannot create the output folder {out}: {e.strerror or e}") from None
    final = out / entry.short_name
    tmp = make_temp_dir(prefix=f".{entry.short_name}.tmp-", parent=out)  # becomes the op folder: umask's mode
    try:
        manifest = build_manifest(entry, tmp, _kept_traced(final, entry.op_id) if final.exists() else [])
        write_manifest(tmp, Manifest.model_validate(manifest.model_dump()))
        if final.exists():
            done = _carry_over(final, tmp)
            old = Path(tempfile.mkdtemp(prefix=f".{entry.short_name}.old-", dir=out))
            final.rename(old / "x")
            tmp.rename(final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(final)
            done = WrittenOp(path=final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return done


def resolve_entries(names: list[str]) -> list[CatalogEntry]:
    """Every name resolved (and checked extractable) before anything is written."""
    infos = list_ops()
    entries: list[CatalogEntry] = []
    for name in names:
        info = resolve(name, infos)
        entry = catalog.find(info.op_id)
        if entry is None or not info.extractable:
            raise AstraError(f"{info.op_id} cannot be extracted: {info.reason}")
        if entry not in entries:
            entries.append(entry)
    return entries


def extract(names: list[str], out: Path, progress: Callable[[str, WrittenOp], None] | None = None) -> list[Path]:
    written = []
    for entry in resolve_entries(names):
        done = write_op(entry, out)
        written.append(done.path)
        if progress:
            progress(entry.short_name, done)
    return written


__all__ = ["extract", "write_op", "build_manifest", "resolve_entries", "vendor_triton_sources", "VendoredSources",
           "MANIFEST_NAME"]
