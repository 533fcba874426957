"""``extract --list``: every kernel the installed SGLang knows, where its source is, and whether we can extract it.

Sources: the kernel registry (``all_specs()``), BaseFusedOp instances, and serving entry points that are not
registered op ids (listed under the id ``op_id_of`` gives them, the one ``family.name`` form; their ``module:attr``
is still accepted as a name). The source kind of each backend comes from a static scan of its target's module: a
``load_jit(cuda_files=[...])`` call makes it CUDA JIT, ``@triton.jit`` kernels make it Triton; when the target
is a ``forward_*`` method that imports its implementation, the imported modules are scanned too.
"""

from __future__ import annotations

import difflib
import re
import sys

from pydantic import BaseModel

from astra_sglang.contract.op import SourceKind, canonical_op_id, op_id_of
from astra_sglang.errors import AstraError
from astra_sglang.extract import catalog
from astra_sglang.extract.closure import include_closure
from astra_sglang.extract.py_closure import python_closure
from astra_sglang.extract.sglang_env import jit_dir, require_sglang, sglang_root
from astra_sglang.extract.source_scan import imported_modules_of, scan_module

# Entry points SGLang serves with that are not registry op ids (catalog entry points are added too); each is listed
# under op_id_of(entry point), e.g. layernorm.fused_add_rmsnorm.
SERVING_ENTRY_POINTS: tuple[str, ...] = (
    "sglang.kernels.ops.layernorm.norm:fused_add_rmsnorm",
    "sglang.kernels.ops.layernorm.norm:rmsnorm",
    "sglang.kernels.ops.layernorm.norm:fused_inplace_qknorm",
)

_KIND_ORDER = ("cuda_jit", "triton", "compiled_only", "other", "torch")


class OpInfo(BaseModel):
    op_id: str  # 'family.name': the registry's op id, or op_id_of(entry_point) for an op SGLang does not register
    backends: list[str]
    source_kind: SourceKind
    sources: list[str]  # relative to the installed sglang package (JIT: relative to kernels/jit/csrc)
    torch_reference: bool
    fused_op: bool = False
    registered: bool = True
    entry_point: str | None = None  # 'module:attr' SGLang calls, for an op it does not register (its own name for it)
    extractable: bool
    reason: str = ""
    short_name: str | None = None  # the catalog's folder name when extractable
    # Triton: its vendored closure imports where SGLang cannot (statically, or checked in a subprocess with
    # --check-load); CUDA JIT: its header closure resolves. None for other kinds.
    standalone: bool | None = None
    standalone_reason: str = ""
    standalone_checked: bool = False  # True once a subprocess imported it (--check-load)


def triton_module(target: str) -> tuple[str, str | None] | None:
    """(module holding the @triton.jit kernels, its launch wrapper if a top-level function) of a triton target."""
    module, _, qual = target.partition(":")
    imported = [m for m in imported_modules_of(module, qual) if m.startswith("sglang")]
    for mod in [module, *imported]:
        scan = scan_module(mod)
        if scan is None or scan.error or not scan.triton_kernels:
            continue
        if mod == module:
            return mod, qual if qual in scan.functions and "." not in qual else None
        names = [m[len(mod) + 1:] for m in imported if m.startswith(mod + ".")]
        return mod, next((n for n in names if n in scan.functions), None)
    return None


def cuda_standalone(sources: list[str]) -> tuple[bool, str]:
    """Whether every JIT source and the headers it includes from SGLang's jit folder are in the package."""
    csrc, include = jit_dir() / "csrc", jit_dir() / "include"
    roots = [csrc / s for s in sources]
    missing = [s for s, r in zip(sources, roots) if not r.is_file()]
    if missing:
        return False, f"JIT source {missing[0]} is not in the installed SGLang"
    try:
        include_closure(roots, [include], within=[jit_dir()])
    except AstraError as e:
        return False, str(e)
    return True, ""


def _backend_kind(backend: str, target: str) -> tuple[str, list[str], str | None]:
    """(kind, sources, problem) of one backend target."""
    if backend in ("torch", "torch_compile"):
        return "torch", [], None
    if backend == "aot":
        return "compiled_only", [], None
    if backend not in ("jit", "triton"):
        return "other", [], None
    module, _, qual = target.partition(":")
    candidates = [module] + [m for m in imported_modules_of(module, qual) if m.startswith("sglang")]
    root = sglang_root()
    for mod in candidates:
        scan = scan_module(mod)
        if scan is None:
            continue
        if scan.error:
            return "other", [], scan.error
        if backend == "jit" and (scan.cuda_files or scan.dynamic_load_jit):
            if not scan.cuda_files:
                return "cuda_jit", [], f"load_jit in {mod} has no literal cuda_files list"
            return "cuda_jit", list(scan.cuda_files), None
        if backend == "triton" and scan.triton_kernels:
            rel = str(scan.path.relative_to(root)) if scan.path.is_relative_to(root) else str(scan.path)
            refusal = python_closure(mod).refusal
            problem = f"its SGLang imports cannot be vendored: {refusal}" if refusal else None
            return "triton", [rel], problem
    if backend == "jit":
        return "other", [], "no load_jit(cuda_files=...) found in the target's module"
    return "other", [], "no @triton.jit kernel found in the target's module"


def _fused_ops() -> dict[str, bool]:
    """op id -> defines its own forward_native, for every BaseFusedOp instance imported so far."""
    from sglang.kernels.fused_op import BaseFusedOp

    found: dict[str, bool] = {}
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("sglang"):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, BaseFusedOp) and value.op:
                found[value.op] = "forward_native" in type(value).__dict__ or any(
                    "forward_native" in k.__dict__ for k in type(value).__mro__[1:] if k is not BaseFusedOp
                )
    return found


def no_entry_reason(op_id: str, source: str) -> str:
    """Why an op with a kernel source cannot be extracted, with the command that drafts the missing contract."""
    return (f"{source} but no catalog entry (signature, reference, shapes): draft one with "
            f"`astra-sglang extract {op_id} --draft`")


def _info(op_id: str, targets: list[tuple[str, str]], fused: dict[str, bool], registered: bool,
          entry_point: str | None = None) -> OpInfo:
    kinds: dict[str, tuple[list[str], str | None]] = {}
    for backend, target in targets:
        kind, sources, problem = _backend_kind(backend, target)
        if kind not in kinds or (kinds[kind][1] and not problem):
            kinds[kind] = (sources, problem)
    kind = next((k for k in _KIND_ORDER if k in kinds), "other")
    sources, problem = kinds.get(kind, ([], None))
    backends = sorted({b for b, _ in targets})
    torch_ref = "torch" in backends or fused.get(op_id, False)
    standalone: bool | None = None
    standalone_reason = ""
    if kind == "triton":
        standalone, standalone_reason = problem is None, problem or ""
    elif kind == "cuda_jit":
        standalone, standalone_reason = cuda_standalone(sources) if sources else (False, problem or "no sources")
    entry = catalog.find(op_id)
    if entry is not None:
        return OpInfo(op_id=op_id, backends=backends, source_kind=entry.kind, sources=sources, torch_reference=torch_ref
                      or entry.forward_native is not None, fused_op=op_id in fused, registered=registered,
                      extractable=True, short_name=entry.short_name, standalone=standalone,
                      standalone_reason=standalone_reason, entry_point=entry_point)
    if kind == "cuda_jit":
        reason = problem or no_entry_reason(op_id, f"CUDA JIT ({', '.join(sources)})")
    elif kind == "triton":
        reason = f"Triton source, but {problem}" if problem else no_entry_reason(op_id, "Triton source")
    elif kind == "compiled_only":
        reason = "compiled only (sgl_kernel wheel): no source in the installed package"
    elif kind == "torch":
        reason = "pure torch: nothing to extract"
    else:
        reason = problem or f"backends {', '.join(backends)} are neither CUDA JIT nor Triton"
    return OpInfo(op_id=op_id, backends=backends, source_kind=kind, sources=sources, torch_reference=torch_ref,
                  fused_op=op_id in fused, registered=registered, extractable=False, reason=reason,
                  standalone=standalone, standalone_reason=standalone_reason, entry_point=entry_point)


def list_ops() -> list[OpInfo]:
    require_sglang()
    from sglang.kernels.registry import registry

    by_op: dict[str, list[tuple[str, str]]] = {}
    for spec in registry.all_specs():
        by_op.setdefault(spec.op, []).append((spec.backend.value, spec.target))
    fused = _fused_ops()
    infos = [_info(op, targets, fused, True) for op, targets in sorted(by_op.items())]
    extra = [(op_id_of(t), t) for t in SERVING_ENTRY_POINTS] + [(e.op_id, e.entry_point) for e in catalog.entries()]
    listed = set(by_op)
    for op_id, target in extra:
        if op_id in listed:  # SGLang registers it, or it is listed already: once, under that id
            continue
        listed.add(op_id)
        entry = catalog.find(op_id)
        kind = "triton" if entry is not None and entry.kind == "triton" else "jit"
        infos.append(_info(op_id, [(kind, target)], fused, False, entry_point=target))
    return infos


def resolve(name: str, infos: list[OpInfo]) -> OpInfo:
    """An op id, 'module:attr', catalog short name/alias, or an unambiguous suffix -> its OpInfo.

    An unregistered op's 'module:attr' (the op id it had before the one ``family.name`` form) names it too."""
    entry = catalog.find(name)
    if entry is not None:
        for info in infos:
            if info.op_id == entry.op_id:
                return info
    canonical = canonical_op_id(name)
    exact = [i for i in infos if i.op_id in (name, canonical) or i.entry_point == name]
    if exact:
        return exact[0]
    last = {i.op_id: i.op_id.split(":")[-1].split(".")[-1] for i in infos}
    suffix = [i for i in infos if last[i.op_id] == name] or [i for i in infos if name in last[i.op_id]]
    if len(suffix) == 1:
        return suffix[0]
    if len(suffix) > 1:
        raise AstraError(f"op {name!r} is ambiguous: {', '.join(i.op_id for i in suffix[:8])}; give the full op id")
    raise AstraError(_unknown(name, [i.op_id for i in infos] + [e.short_name for e in catalog.entries()]))


def _unknown(name: str, names: list[str]) -> str:
    """'unknown op X; did you mean Y?': the closest known names, or where to look when none is close."""
    close = difflib.get_close_matches(name, names, n=5, cutoff=0.5) or [
        n for n in names if name.lower() in n.lower()
    ][:5]
    if not close:
        return f"unknown op {name!r}; `astra-sglang extract --list` lists every op of the installed SGLang"
    return f"unknown op {name!r}; did you mean {close[0]}?" + (f" (or {', '.join(close[1:])})" if close[1:] else "")


def _last(name: str) -> str:
    return name.split(":")[-1].split(".")[-1]


def check_names(names: list[str]) -> None:
    """Refuse, in one line and without importing SGLang, a name that cannot be one of its ops.

    Importing SGLang and scanning its registry takes ~40 s on a CPU host: a typo should not wait for it. A name
    passes when the catalog knows it or its last part occurs in the source of SGLang's kernel package (the
    registry builds every op id from names in those files, and ``resolve`` also takes a part of one); the scan
    decides the others. The suggestions then come from the catalog and the package's public functions.
    """
    unknown = [n for n in dict.fromkeys(names) if catalog.find(n) is None]
    kernels = sglang_root() / "kernels" if unknown else None
    if kernels is None or not kernels.is_dir():  # nothing to check, or an SGLang laid out otherwise: the scan says
        return
    text: list[str] = []
    for path in sorted(kernels.rglob("*.py")):
        try:
            text.append(path.read_text(errors="replace"))
        except OSError:
            continue
    text += [e.entry_point for e in catalog.entries()] + list(SERVING_ENTRY_POINTS)  # ids list_ops adds
    source = "\n".join(text)
    for name in unknown:
        if _last(name) not in source:
            known = {n for e in catalog.entries() for n in (e.short_name, e.op_id, *e.aliases)}
            known.update(re.findall(r"^\s*def ([A-Za-z]\w*)", source, re.MULTILINE))
            raise AstraError(_unknown(name, sorted(known)))
