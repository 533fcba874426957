"""The patch registry, read-only: where patches live, which are enabled, which apply here (the serving side).

Selection has two layers on purpose. ``patches enable/disable`` persist in a small state file (per user,
``~/.config/astra-sglang/patches-state.json`` or ``$ASTRA_SGLANG_STATE_FILE``); the environment variable
``ASTRA_SGLANG_PATCHES`` decides per process: unset/empty/``0``/``off`` = nothing, ``all`` = every patch
the state file leaves enabled, ``id1,id2`` = exactly those (the variable rules, even over ``disable``).
No torch import here: the plugin runs this inside every SGLang process. Writing the state file and adding
patches is offline tooling (``astra_sglang.patches.tooling``).
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from astra_sglang.contract.base import Model, sha256_file
from astra_sglang.contract.op import (
    Manifest,
    ManifestError,
    entry_and_call,
    load_manifest,
    manifest_digest,
)
from astra_sglang.contract.patch import (
    MANIFEST_NAME,
    PatchManifest,
    PatchManifestError,
    file_problem,
    load_patch_manifest,
    target_problem,
)
from astra_sglang.contract.restore import build_files_problem
from astra_sglang.data_paths import bundled_extracted, bundled_patches
from astra_sglang.errors import AstraError
from astra_sglang.patches.env import ALL_VALUES, ENV_SELECT, OFF_VALUES
from astra_sglang.platform_info import CPU_INTERPRET_ARCH, norm_arch, same_gpu

ENV_ROOT = "ASTRA_SGLANG_PATCHES_DIR"
ENV_STATE = "ASTRA_SGLANG_STATE_FILE"
ENV_EXTRACTED = "ASTRA_SGLANG_EXTRACTED_DIR"


def patches_root() -> Path:
    """``$ASTRA_SGLANG_PATCHES_DIR``, else the registry shipped with the package (the checkout's in editable mode)."""
    env = os.environ.get(ENV_ROOT)
    return Path(env).expanduser().resolve() if env else bundled_patches()


def op_folder(op: str) -> Path:
    """The committed part of the op's extracted folder: ``$ASTRA_SGLANG_EXTRACTED_DIR/<op>``, else the bundled one."""
    base = os.environ.get(ENV_EXTRACTED)
    return (Path(base).expanduser() if base else bundled_extracted()) / op


def load_op(m: PatchManifest) -> Manifest:
    """The op manifest a patch was validated against; AstraError when it is missing, unreadable or changed."""
    folder = op_folder(m.op)
    try:
        op = load_manifest(folder)
    except ManifestError as e:
        raise AstraError(f"extracted op {m.op} unusable: {e}") from None
    sha = manifest_digest(op)
    if sha != m.op_manifest_sha256:
        raise AstraError(f"{folder / MANIFEST_NAME} changed since the patch was validated (digest "
                         f"{sha[:12]}, the patch pins {m.op_manifest_sha256[:12]}); re-validate with `patches verify "
                         "--record` on a GPU host, or restore the committed folder with `git checkout extracted/`")
    return op


# ----------------------------------------------------------------------------------------------- discovery


@dataclass
class PatchEntry:
    patch_id: str
    op: str
    path: Path
    manifest: PatchManifest | None
    error: str | None = None  # unreadable manifest


def discover(root: Path | None = None) -> list[PatchEntry]:
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


def find(patch_id: str, root: Path | None = None) -> PatchEntry:
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
    gpu: str = ""  # the GPU model it ran on ("" in records written before GPUs were named)
    manifest_sha256: str
    when: str
    geomean_speedup: float | None = None
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


# ------------------------------------------------------------------------------------------------ selection


def requested_ids(value: str | None = None) -> set[str] | Literal["all"] | None:
    """Parse ``ASTRA_SGLANG_PATCHES``: None = off, 'all', or a set of patch ids."""
    raw = os.environ.get(ENV_SELECT, "") if value is None else value
    v = raw.strip()
    if v.lower() in OFF_VALUES:
        return None
    if v.lower() in ALL_VALUES:
        return "all"
    return {x.strip() for x in v.split(",") if x.strip()}


def selected(entries: list[PatchEntry], value: str | None = None) -> tuple[list[PatchEntry], list[str]]:
    """The entries this process should try, and ids asked for that do not exist."""
    req = requested_ids(value)
    if req is None:
        return [], []
    if req == "all":
        disabled = set(load_state().disabled)
        return [e for e in entries if e.patch_id not in disabled and (e.manifest is None or e.manifest.in_all)], []
    by_id = {e.patch_id: e for e in entries}
    return [by_id[i] for i in sorted(req) if i in by_id], sorted(i for i in req if i not in by_id)


# ------------------------------------------------------------------------------------------- applicability


def installed_sglang_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except PackageNotFoundError:
        return None


def static_problem(entry: PatchEntry, sglang_version: str | None) -> str | None:
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
    return op_problem(m) or build_problem(m)


def build_problem(m: PatchManifest) -> str | None:
    """Why this patch's kernel cannot be built in this environment, or None.

    Asked at start-up so the plugin's one line says "cannot build here" instead of "installed" followed by a
    build failure at the first call (a serving environment is SGLang's: it may lack FlashInfer's package, nvcc or
    ninja). A CUDA patch needs the toolchain SGLang's own JIT needs and the op's headers, which are restored from
    the installed SGLang by SHA-256 (never shipped): both are checked here, without building."""
    if m.source.kind == "triton":
        return None if importlib.util.find_spec("triton") is not None else "cannot build here: Triton is not installed"
    from astra_sglang.loader import toolchain

    try:
        toolchain.nvcc_path()
        toolchain.host_compiler()
        toolchain.ninja_path()
        toolchain.tvm_ffi_paths()
    except AstraError as e:
        return f"cannot build here: {e}"
    try:
        problem = build_files_problem(op_folder(m.op))
    except ManifestError as e:
        problem = str(e)
    return f"cannot build here: {problem}" if problem else None


def op_problem(m: PatchManifest) -> str | None:
    """Why the op manifest cannot serve this patch: changed, wrong kind, targets not its call sites, no tolerance."""
    try:
        op = load_op(m)
        entry_and_call(op, m.source.kind)
    except AstraError as e:
        return str(e)
    missing = [d for d in m.guard.dtypes if d not in op.tolerances]
    if missing:
        return f"the op manifest has no tolerance for {', '.join(missing)}"
    return target_problem(op, m.targets)


def device_problem(m: PatchManifest, arch: str | None, gpu: str | None = None) -> str | None:
    """Why this patch cannot serve on a device of ``arch`` (None = no CUDA device) named ``gpu``, or None. A
    guard is where the patch won on the GPUs it was measured on: on another model of the same arch (an H100 for
    one measured on an H200: 30% less bandwidth, the same sm_90) SGLang's kernel serves until it is measured
    there (``patches verify --record``)."""
    if arch is None:
        return "no CUDA device"
    if arch == CPU_INTERPRET_ARCH and m.source.kind != "triton":
        return "CUDA kernels need a GPU (only Triton runs under TRITON_INTERPRET=1)"
    if norm_arch(arch) not in {norm_arch(a) for a in m.validated_on.archs}:
        return f"GPU arch {arch}, patch validated on {', '.join(m.validated_on.archs)}"
    return gpu_model_problem(m, gpu) if arch != CPU_INTERPRET_ARCH else None


def gpu_model_problem(m: PatchManifest, gpu: str | None) -> str | None:
    """Why this patch stands aside on the GPU model ``gpu`` (its arch accepted), or None: measured on other models
    only, or its guard serves nothing here. One composition for the plugin and `patches coverage`, which once
    checked the first alone and showed a rewrite on its front guard where the plugin served its own."""
    return gpu_problem(m, gpu) or guard_problem(m, gpu)


def gpu_problem(m: PatchManifest, gpu: str | None) -> str | None:
    """The GPU-model half of ``device_problem``: a patch measured on other GPU models only (its ``validated_on.gpus``)
    stands aside on ``gpu``; None when it may serve there (or no GPU is named, or the manifest names none)."""
    gpus = m.validated_on.gpus
    if gpu and gpus and not any(same_gpu(gpu, g) for g in gpus):
        return (f"GPU {gpu}, patch measured on {', '.join(gpus)} (its guard is where it won there; "
                f"`astra-sglang patches verify {m.patch_id} --record` measures it here and adds it)")
    return None


def guard_problem(m: PatchManifest, gpu: str | None) -> str | None:
    """Why a guard measured per GPU serves nothing on ``gpu`` (None: it serves something). The plugin refuses such
    a patch there, with this reason, instead of installing a hook that hands every call to SGLang: the rewrite's
    H200 record predates the S 512 twins, so it serves nothing on an H200 (2026-12-07)."""
    if not gpu or not m.guard.gpu_regions or m.guard.on_gpu(gpu) is not None:
        return None
    return (f"its guard serves no shape on {gpu}: no shape timed there won (at both ends of any size the guard "
            f"cannot see, decode attention's KV length S); `astra-sglang patches verify {m.patch_id} --record` "
            "on this GPU times them")


def validated_here(entry: PatchEntry, sglang_version: str | None, arch: str | None,
                   gpu: str | None = None) -> tuple[bool, str]:
    m = entry.manifest
    if m is None or sglang_version is None or arch is None:
        return False, "no " + ("readable manifest" if m is None else "SGLang" if sglang_version is None else "device")
    if sglang_version in m.validated_on.sglang_versions and device_problem(m, arch, gpu) is None:
        return True, "manifest"
    msha = sha256_file(entry.path / MANIFEST_NAME)
    for r in load_state().verified.get(m.patch_id, []):
        if (r.sglang_version == sglang_version and norm_arch(r.arch) == norm_arch(arch) and r.manifest_sha256 == msha
                and (not gpu or not m.validated_on.gpus or same_gpu(r.gpu, gpu))):
            return r.ok, f"verify {r.when}" + ("" if r.ok else f" failed: {r.detail}")
    where = f"{arch}" + (f" ({gpu})" if gpu else "")
    return False, f"not validated on SGLang {sglang_version} / {where}; run `patches verify {m.patch_id}`"


