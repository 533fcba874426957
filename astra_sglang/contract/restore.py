"""Refill an extracted op folder with the SGLang/FlashInfer files it pins, checked by SHA-256.

Those files belong to SGLang and FlashInfer, so the repository (and a wheel) keeps only their SHA-256 in the
manifest; they are copied again from the installed packages. A hash mismatch means the installed version
differs from the one the folder was extracted from, and the folder must be re-extracted rather than trusted. A copied
file the user edited is replaced, never silently: the edit is kept beside it and the report names both.
Part of the contract (stdlib only) because the plugin completes a folder inside SGLang's server before it
builds a CUDA patch, and ``extract --restore`` does the same for a fresh clone.
"""

from __future__ import annotations

import importlib.util
import shutil
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from astra_sglang.contract.base import make_temp_dir
from astra_sglang.contract.base import sha256_file as sha256
from astra_sglang.contract.op import MANIFEST_NAME, SourceFile, load_manifest
from astra_sglang.errors import AstraError


def installed_package_root(package: str) -> Path | None:
    """The folder of an installed package, found without importing it (importing SGLang costs seconds)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]).resolve()


_INSTALL = {"sglang": "SGLang is not installed in this Python; install it with `pip install 'astra-sglang[sglang]'`",
            "flashinfer": "flashinfer-python is not installed; `pip install --no-deps flashinfer-python==0.7.2`"}


def _package_root(origin: str) -> Path:
    package = origin.split(":", 1)[0]
    if package not in _INSTALL:
        raise AstraError(f"unknown file origin {origin!r}")
    root = installed_package_root(package)
    if root is None:
        raise AstraError(_INSTALL[package])
    return root


def backup_path(path: Path) -> Path:
    """A free ``NAME.edited-YYYYmmdd-HHMMSS[-N]`` beside ``path`` (never an extension a build would pick up)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    candidate = path.with_name(f"{path.name}.edited-{stamp}")
    n = 1
    while candidate.exists() or candidate.is_symlink():
        n += 1
        candidate = path.with_name(f"{path.name}.edited-{stamp}-{n}")
    return candidate


@dataclass
class Restored:
    folder: Path
    copied: list[str] = field(default_factory=list)  # missing, copied back
    overwritten: list[str] = field(default_factory=list)  # present with another content, replaced
    backups: list[str] = field(default_factory=list)  # the replaced content, kept beside the file

    def line(self) -> str:
        text = f"{self.folder}: verified ({len(self.copied) + len(self.overwritten)} file(s) restored)"
        if self.overwritten:
            text += (f"; overwrote {len(self.overwritten)} file(s) that differed from the installed package: "
                     + ", ".join(f"{o} (your version: {b})" for o, b in zip(self.overwritten, self.backups)))
        return text


#: the files only the harness reads (the library kernel SGLang serves with, timed beside the original): a patch's
#: build never includes them, so a serving environment without that library (FlashInfer) can still build it
BASELINE_ROLES = frozenset({"baseline_kernel", "baseline_header"})


def _needed(f: SourceFile, for_build: bool) -> bool:
    return not (for_build and f.role in BASELINE_ROLES)


def restore_folder(op_dir: Path, *, for_build: bool = False) -> Restored:
    """Copy back every non-committed file of one folder (``for_build``: only those a build of the op or a patch
    reads) and verify every such file's hash. A file that is there with another content (an edit) is replaced,
    and its content kept as ``NAME.edited-<timestamp>``."""
    manifest = load_manifest(op_dir)
    done, bad = Restored(folder=Path(op_dir)), []
    for f in (f for f in manifest.files if _needed(f, for_build)):
        dest = op_dir / f.path
        if not f.committed:
            src = _package_root(f.origin) / f.origin.split(":", 1)[1]
            if not src.is_file():
                bad.append(f"{f.path}: {src} is missing from the installed package")
                continue
            if sha256(src) != f.sha256:  # another SGLang version: leave the folder as it is
                bad.append(f"{f.path}: SHA-256 of the installed {src} differs from the manifest")
                continue
            if not dest.is_file():
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dest)
                done.copied.append(f.path)
            elif sha256(dest) != f.sha256:
                backup = backup_path(dest)
                dest.rename(backup)
                shutil.copyfile(src, dest)
                done.overwritten.append(f.path)
                done.backups.append(backup.relative_to(op_dir).as_posix())
        if not dest.is_file():
            bad.append(f"{f.path}: missing")
        elif sha256(dest) != f.sha256:
            bad.append(f"{f.path}: SHA-256 differs from the manifest")
    if bad:
        raise AstraError(
            f"{op_dir}: {len(bad)} file(s) do not match the manifest (extracted from SGLang {manifest.sglang_version}); "
            f"re-extract with `astra-sglang extract {manifest.short_name}`: " + "; ".join(bad[:3])
        )
    return done


def is_complete(op_dir: Path, *, for_build: bool = False) -> bool:
    """Every file the manifest names (``for_build``: every file a build reads) is present (hashes are checked when
    a folder is restored)."""
    manifest = load_manifest(op_dir)
    return all((op_dir / f.path).is_file() for f in manifest.files if _needed(f, for_build))


def build_files_problem(op_dir: Path) -> str | None:
    """Why the files a build of this op reads cannot be had here, or None: each is in the folder or in the
    installed package it came from with the pinned SHA-256. Cheap (a few small files hashed): the plugin asks at
    start-up, so an operator reads "cannot build here" in its one line instead of a failure at the first call."""
    op_dir = Path(op_dir)
    manifest = load_manifest(op_dir)
    for f in (f for f in manifest.files if _needed(f, True)):
        here = op_dir / f.path
        if here.is_file() and sha256(here) == f.sha256:
            continue
        if f.committed:
            return f"{f.path} is missing from {op_dir}"
        try:
            src = _package_root(f.origin) / f.origin.split(":", 1)[1]
        except AstraError as e:
            return f"needs {f.path}: {e}"
        if not src.is_file():
            return f"needs {f.path}, which the installed package lacks ({src})"
        if sha256(src) != f.sha256:
            return (f"the installed {f.origin.split(':', 1)[0]} has another {f.origin.split(':', 1)[1]} than the one "
                    f"the op was extracted from (SGLang {manifest.sglang_version})")
    return None


def materialize(op_dir: Path, cache_root: Path) -> Path:
    """``op_dir`` if it holds every file a build reads, else a hash-verified copy refilled from the installed
    SGLang.

    A wheel carries only the committed part of a folder (SGLang's files are never redistributed), and its
    site-packages may be read-only: the copy goes to ``cache_root``, keyed by the manifest's hash so another
    extraction never reuses it. A different installed SGLang fails the hash check: the caller falls back. Only the
    files a build reads are restored: the library baseline's (FlashInfer's headers, which only the harness times)
    are not, so a serving environment without flashinfer-python builds patches too.
    """
    op_dir = Path(op_dir)
    if is_complete(op_dir, for_build=True):
        return op_dir
    manifest = load_manifest(op_dir)
    key = sha256(op_dir / MANIFEST_NAME)[:16]
    dest = Path(cache_root) / "extracted" / f"{op_dir.name}-{key}"
    if dest.is_dir() and is_complete(dest, for_build=True):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = make_temp_dir(prefix=f".{op_dir.name}.tmp-", parent=dest.parent)
    try:
        shutil.copyfile(op_dir / MANIFEST_NAME, tmp / MANIFEST_NAME)
        for f in manifest.files:
            if f.committed:
                (tmp / f.path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(op_dir / f.path, tmp / f.path)
        restore_folder(tmp, for_build=True)
        if dest.exists():  # a concurrent process finished first: keep its copy
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest
