"""What ``extract`` and ``extract --restore`` do with files in an op folder that are not theirs to replace.

An op folder is the user's workspace as much as extract's: notes, scripts, build caches and edits to the copied
sources live there. extract replaces only files it wrote, unchanged since; anything else is carried over, and an
edited file is kept beside the fresh copy as ``NAME.edited-<timestamp>`` so nothing the user wrote is lost.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def carry(src: Path, dest: Path) -> None:
    """Copy ``src`` to ``dest`` (a hard link where possible: build caches can be large); the source stays
    until the caller's swap succeeded, so a failure loses nothing."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src.is_symlink():
        os.symlink(os.readlink(src), dest)
        return
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def files_under(root: Path) -> list[Path]:
    """Every file (and symlink) under ``root``, without following links into other folders."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        out += [base / f for f in filenames]
        out += [base / d for d in dirnames if (base / d).is_symlink()]
    return sorted(out)


def summarize(rels: list[str]) -> str:
    """'build/ (12 files), notes.txt': top-level entries, so a build cache is one item, not hundreds."""
    groups: dict[str, int] = {}
    for rel in rels:
        head, sep, _ = rel.partition("/")
        key = head + "/" if sep else head
        groups[key] = groups.get(key, 0) + 1
    return ", ".join(k if not k.endswith("/") else f"{k} ({n} file{'s' if n > 1 else ''})" for k, n in groups.items())
