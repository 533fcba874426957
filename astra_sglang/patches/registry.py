"""The patch registry: where patches live, which are enabled, which apply here, and how new ones get in.

Selection has two layers on purpose. ``patches enable/disable`` persist in a small state file (per user,
``~/.config/astra-sglang/patches-state.json`` or ``$ASTRA_SGLANG_STATE_FILE``); the environment variable
``ASTRA_SGLANG_PATCHES`` decides per process: unset/empty/``0``/``off`` = nothing, ``all`` = every patch
the state file leaves enabled, ``id1,id2`` = exactly those (the variable rules, even over ``disable``).
No torch import here: the plugin runs this inside every SGLang process.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, Optional

from pydantic import Field

from astra_sglang.contract.base import Model, sha256_file, write_atomic
from astra_sglang.contract.patch import (
    CPU_INTERPRET_ARCH,
    MANIFEST_NAME,
    CallSite,
    Evidence,
    GuardSpec,
    KernelSpec,
    PatchManifest,
    PatchManifestError,
    Provenance,
    ValidatedOn,
    file_problem,
    load_patch_manifest,
    pin_files,
    write_patch_manifest,
)
from astra_sglang.data_paths import bundled_patches
from astra_sglang.errors import AstraError
from astra_sglang.patches.env import ALL_VALUES, ENV_SELECT, OFF_VALUES

ENV_ROOT = "ASTRA_SGLANG_PATCHES_DIR"
ENV_STATE = "ASTRA_SGLANG_STATE_FILE"
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def patches_root() -> Path:
    """``$ASTRA_SGLANG_PATCHES_DIR``, else the registry shipped with the package (the checkout's in editable mode)."""
    env = os.environ.get(ENV_ROOT)
    return Path(env).expanduser().resolve() if env else bundled_patches()


# ----------------------------------------------------------------------------------------------- discovery


@dataclass
class PatchEntry:
    patch_id: str
    op: str
    path: Path
    manifest: Optional[PatchManifest]
    error: Optional[str] = None  # unreadable manifest


def discover(root: Optional[Path] = None) -> list[PatchEntry]:
    root = Path(root) if root is not None else patches_root()
    entries: list[PatchEntry] = []
    if not root.is_dir():
        return entries
    for mpath in sorted(root.glob(f"*/*/{MANIFEST_NAME}")):
        d = mpath.parent
        try:
            m = load_patch_manifest(d)
            entries.append(PatchEntry(m.patch_id, m.op, d, m))
        except PatchManifestError as e:
            entries.append(PatchEntry(d.name, d.parent.name, d, None, str(e)))
    return entries


def find(patch_id: str, root: Optional[Path] = None) -> PatchEntry:
    for e in discover(root):
        if e.patch_id == patch_id:
            return e
    known = ", ".join(e.patch_id for e in discover(root)) or "none"
    raise AstraError(f"no patch {patch_id!r} under {root or patches_root()} (known: {known})")


# ---------------------------------------------------------------------------------------------- state file


class VerifyRecord(Model):
    ok: bool
    sglang_version: str
    arch: str
    manifest_sha256: str
    when: str
    geomean_speedup: Optional[float] = None
    detail: str = ""


class PatchState(Model):
    schema_version: int = 1
    disabled: list[str] = Field(default_factory=list)
    verified: dict[str, list[VerifyRecord]] = Field(default_factory=dict)


def state_path() -> Path:
    env = os.environ.get(ENV_STATE)
    if env:
        return Path(env).expanduser()
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "astra-sglang" / "patches-state.json"


def load_state() -> PatchState:
    p = state_path()
    if not p.is_file():
        return PatchState()
    try:
        return PatchState.model_validate(json.loads(p.read_text()))
    except Exception as e:
        raise AstraError(f"{p}: unreadable patch state file ({type(e).__name__}); fix or delete it") from None


def save_state(state: PatchState) -> Path:
    p = state_path()
    write_atomic(p, state.model_dump_json(indent=2) + "\n")
    return p


def set_enabled(patch_id: str, enabled: bool, root: Optional[Path] = None) -> Path:
    find(patch_id, root)  # refuse unknown ids: a typo must not silently do nothing
    st = load_state()
    disabled = set(st.disabled)
    (disabled.discard if enabled else disabled.add)(patch_id)
    st.disabled = sorted(disabled)
    return save_state(st)


def record_verify(patch_id: str, rec: VerifyRecord) -> None:
    st = load_state()
    recs = [r for r in st.verified.get(patch_id, []) if (r.sglang_version, r.arch) != (rec.sglang_version, rec.arch)]
    st.verified[patch_id] = recs + [rec]
    save_state(st)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# ------------------------------------------------------------------------------------------------ selection


def requested_ids(value: Optional[str] = None) -> Optional[set[str] | Literal["all"]]:
    """Parse ``ASTRA_SGLANG_PATCHES``: None = off, 'all', or a set of patch ids."""
    raw = os.environ.get(ENV_SELECT, "") if value is None else value
    v = raw.strip()
    if v.lower() in OFF_VALUES:
        return None
    if v.lower() in ALL_VALUES:
        return "all"
    return {x.strip() for x in v.split(",") if x.strip()}


def selected(entries: list[PatchEntry], value: Optional[str] = None) -> tuple[list[PatchEntry], list[str]]:
    """The entries this process should try, and ids asked for that do not exist."""
    req = requested_ids(value)
    if req is None:
        return [], []
    if req == "all":
        disabled = set(load_state().disabled)
        return [e for e in entries if e.patch_id not in disabled], []
    by_id = {e.patch_id: e for e in entries}
    return [by_id[i] for i in sorted(req) if i in by_id], sorted(i for i in req if i not in by_id)


# ------------------------------------------------------------------------------------------- applicability


def installed_sglang_version() -> Optional[str]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except PackageNotFoundError:
        return None


def norm_arch(arch: str) -> str:
    """'sm_90a' and 'sm_90' name the same device: validation is per device, the suffix is a compile target."""
    return re.sub(r"(?<=\d)[a-z]$", "", arch.strip().lower())


def static_problem(entry: PatchEntry, sglang_version: Optional[str]) -> Optional[str]:
    """Why this patch cannot be used in any process of this install (files, SGLang version), or None."""
    m = entry.manifest
    if m is None:
        return entry.error or "unreadable manifest"
    bad = file_problem(entry.path, m)
    if bad:
        return bad
    if sglang_version is None:
        return "SGLang is not installed"
    if sglang_version not in m.validated_on.sglang_versions:
        return (f"SGLang {sglang_version} installed, patch validated on "
                f"{', '.join(m.validated_on.sglang_versions)}")
    return None


def device_problem(m: PatchManifest, arch: Optional[str]) -> Optional[str]:
    """Why this patch cannot serve on a device of ``arch`` (None = no CUDA device), or None."""
    if arch is None:
        return "no CUDA device"
    if arch == CPU_INTERPRET_ARCH and m.kernel.kind != "triton":
        return "CUDA kernels need a GPU (only Triton runs under TRITON_INTERPRET=1)"
    if norm_arch(arch) not in {norm_arch(a) for a in m.validated_on.archs}:
        return f"GPU arch {arch}, patch validated on {', '.join(m.validated_on.archs)}"
    return None


def validated_here(entry: PatchEntry, sglang_version: Optional[str], arch: Optional[str]) -> tuple[bool, str]:
    m = entry.manifest
    if m is None or sglang_version is None or arch is None:
        return False, "no " + ("readable manifest" if m is None else "SGLang" if sglang_version is None else "device")
    if sglang_version in m.validated_on.sglang_versions and norm_arch(arch) in {
        norm_arch(a) for a in m.validated_on.archs
    }:
        return True, "manifest"
    msha = sha256_file(entry.path / MANIFEST_NAME)
    for r in load_state().verified.get(m.patch_id, []):
        if r.sglang_version == sglang_version and norm_arch(r.arch) == norm_arch(arch) and r.manifest_sha256 == msha:
            return r.ok, f"verify {r.when}" + ("" if r.ok else f" failed: {r.detail}")
    return False, f"not validated on SGLang {sglang_version} / {arch}; run `patches verify {m.patch_id}`"


# ---------------------------------------------------------------------------------------------- adding


def _check_id(patch_id: str) -> None:
    if not _ID.match(patch_id):
        raise AstraError(f"patch id {patch_id!r}: use letters, digits, '_', '-', '.'")


def add_patch(
    op: str,
    source: Path,
    *,
    patch_id: str,
    provenance: Provenance,
    evidence: Optional[Evidence] = None,
    kind: Optional[str] = None,
    entry: Optional[str] = None,
    call: Optional[list[str]] = None,
    op_dir: Optional[str] = None,
    guard: Optional[GuardSpec] = None,
    sglang_versions: Optional[list[str]] = None,
    archs: Optional[list[str]] = None,
    extra_files: Optional[list[Path]] = None,
    description: str = "",
    root: Optional[Path] = None,
    force: bool = False,
) -> Path:
    """Copy a kernel source into ``patches/<op>/<patch_id>/`` and write its manifest.

    Defaults (entry, call, call sites, guard, check shapes, tolerances) come from the op's adapter, so
    registering a measured kernel is one command. ``validated_on`` defaults to the SGLang version the
    evidence was measured with and the arch of its device; a patch with neither applies nowhere until
    ``patches verify --record`` has passed on a machine.
    """
    from astra_sglang.patches.adapters import get_adapter

    _check_id(patch_id)
    source = Path(source)
    if not source.is_file():
        raise AstraError(f"kernel source {source} does not exist")
    ad = get_adapter(op)
    kind = kind or ("triton" if source.suffix == ".py" else "cuda_jit")
    if kind not in ("triton", "cuda_jit"):
        raise AstraError(f"kernel kind {kind!r}: expected triton or cuda_jit")
    if kind == "cuda_jit" and not op_dir:
        op_dir = f"extracted/{op}"
    evidence = evidence or Evidence()
    if sglang_versions is None:
        sglang_versions = sorted({r.sglang_version for r in evidence.results if r.sglang_version})
    if archs is None:
        archs = sorted({a for r in evidence.results if (a := arch_of_device_text(r.device))})
    root = Path(root) if root is not None else patches_root()
    dest = root / op / patch_id
    if dest.exists():
        if not force:
            raise AstraError(f"{dest} exists; pick another --id or pass --force")
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    kernel_name = "kernel.py" if kind == "triton" else "kernel.cuh"
    shutil.copy2(source, dest / kernel_name)
    for f in extra_files or []:
        shutil.copy2(f, dest / Path(f).name)
    m = PatchManifest(
        patch_id=patch_id,
        op=op,
        description=description,
        kernel=KernelSpec(
            kind=kind,  # type: ignore[arg-type]
            source=kernel_name,
            entry=entry or (ad.triton_entry if kind == "triton" else (ad.cuda_entry or "")),
            call=call or (ad.triton_call if kind == "triton" else (ad.cuda_call or [])),
            op_dir=op_dir if kind == "cuda_jit" else None,
        ),
        call_sites=[CallSite(target=t) for t in ad.targets],
        validated_on=ValidatedOn(sglang_versions=sglang_versions, archs=archs),
        guard=guard or ad.default_guard(),
        check_shapes=ad.default_check_shapes(),
        tolerances=ad.default_tolerances(),
        files=pin_files(dest),
        provenance=provenance,
        evidence=evidence,
    )
    write_patch_manifest(dest, m)
    return dest


def arch_of_device_text(device: str) -> Optional[str]:
    """'NVIDIA H200 (sm_90)' -> 'sm_90'; 'cpu (TRITON_INTERPRET=1)' -> 'cpu-interpret'."""
    m = re.search(r"sm_?(\d+[a-z]?)", device or "")
    if m:
        return f"sm_{m.group(1)}"
    if "TRITON_INTERPRET" in (device or ""):
        return CPU_INTERPRET_ARCH
    return None


def load_evidence(paths: list[Path]) -> Evidence:
    """EvalResult JSON files (one result, or a list of them) -> Evidence."""
    from astra_sglang.contract.result import EvalResult

    results = []
    for p in paths:
        try:
            raw = json.loads(Path(p).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise AstraError(f"evidence {p}: not readable JSON ({e})") from None
        items = raw if isinstance(raw, list) else [raw]
        for it in items:
            try:
                results.append(EvalResult.model_validate(it))
            except Exception as e:
                raise AstraError(f"evidence {p}: not a harness EvalResult ({type(e).__name__})") from None
    return Evidence(results=results)


def add_from_run(
    run_dir: Path,
    *,
    patch_id: Optional[str] = None,
    op: Optional[str] = None,
    model: Optional[str] = None,
    rounds: Optional[int] = None,
    root: Optional[Path] = None,
    force: bool = False,
) -> Path:
    """Register the winner of an optimizer run (``runs/<op>/<run-id>/best/``) as a patch.

    ``best/`` must hold exactly one kernel source (``*.cuh`` or ``*.py``); every ``*.json`` in it that parses
    as a harness EvalResult becomes evidence. ``model``/``rounds`` default to what ``best/``'s or the run's
    JSON files say (keys ``model`` and ``rounds``), if anything.
    """
    run_dir = Path(run_dir)
    best = run_dir / "best" if (run_dir / "best").is_dir() else run_dir
    sources = sorted(p for p in best.iterdir() if p.suffix in (".cuh", ".py") and p.is_file()) if best.is_dir() else []
    if len(sources) != 1:
        raise AstraError(f"{best}: expected one kernel source (*.cuh or *.py), found {len(sources)}")
    op = op or run_dir.parent.name
    results, meta = [], {}
    from astra_sglang.contract.result import EvalResult

    for p in sorted(best.glob("*.json")) + sorted(run_dir.glob("*.json")):
        try:
            raw = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        for it in raw if isinstance(raw, list) else [raw]:
            if not isinstance(it, dict):
                continue
            try:
                results.append(EvalResult.model_validate(it))
            except Exception:
                meta.update({k: it[k] for k in ("model", "rounds") if k in it and k not in meta})
    prov = Provenance(
        kind="run",
        run=str(run_dir),
        model=model or meta.get("model"),
        rounds=rounds if rounds is not None else meta.get("rounds"),
    )
    return add_patch(op, sources[0], patch_id=patch_id or f"{run_dir.name}", provenance=prov,
                     evidence=Evidence(results=results), root=root, force=force)
