"""``extract --restore``: refill committed op folders with the SGLang/FlashInfer files they pin.

Those files belong to SGLang and FlashInfer, so the repository keeps only their SHA-256 in the manifest. After a
clone (or in CI) they are copied again from the installed packages; a hash mismatch means the installed version
differs from the one the folder was extracted from, and the folder must be re-extracted rather than trusted.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.extract.closure import sha256
from astra_sglang.extract.manifest import MANIFEST_NAME, load_manifest
from astra_sglang.extract.sglang_env import flashinfer_root, sglang_root


def _package_root(origin: str) -> Path:
    package = origin.split(":", 1)[0]
    if package == "sglang":
        return sglang_root()
    if package == "flashinfer":
        root = flashinfer_root()
        if root is None:
            raise AstraError("flashinfer-python is not installed; `pip install --no-deps flashinfer-python==0.7.2`")
        return root
    raise AstraError(f"unknown file origin {origin!r}")


def restore_folder(op_dir: Path) -> int:
    """Copy back every non-committed file of one folder and verify every file's hash. Returns files copied."""
    manifest = load_manifest(op_dir)
    copied, bad = 0, []
    for f in manifest.files:
        dest = op_dir / f.path
        if not f.committed:
            src = _package_root(f.origin) / f.origin.split(":", 1)[1]
            if not src.is_file():
                bad.append(f"{f.path}: {src} is missing from the installed package")
                continue
            if not dest.is_file() or sha256(dest) != f.sha256:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dest)
                copied += 1
        if not dest.is_file():
            bad.append(f"{f.path}: missing")
        elif sha256(dest) != f.sha256:
            bad.append(f"{f.path}: SHA-256 differs from the manifest")
    if bad:
        raise AstraError(
            f"{op_dir}: {len(bad)} file(s) do not match the manifest (extracted from SGLang {manifest.sglang_version}); "
            f"re-extract with `astra-sglang extract {manifest.short_name}`: " + "; ".join(bad[:3])
        )
    return copied


def restore_all(root: Path) -> list[tuple[Path, int]]:
    folders = sorted(p.parent for p in Path(root).glob(f"*/{MANIFEST_NAME}"))
    if not folders:
        raise AstraError(f"no extracted op folders under {root}")
    return [(d, restore_folder(d)) for d in folders]
