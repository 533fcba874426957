"""Refuse a carried astra-sglang wheel that is not the tree it travelled with.

device.sh installs `.srv/astra_sglang-*.whl`, built here by hand. On 2026-12-04 a wheel built a few minutes before
a packaging fix went to the H200: the e2e's patch failed its build in every process (a file the older wheel
lacked) and 500 device-seconds measured nothing. A run costs too much to find that out from its report, so the
wheel is compared with the tree first: same bytes for every packaged file, and nothing the tree would package
missing from it.

With ASTRA_SGLANG_PATCHES_DIR set, the servers read patches from that folder, not the wheel's copy, so the wheel's
patches are not compared (ship_check.sh RECORD=1 rewrites a manifest on the device just before validate).

Usage: check_wheel.py WHEEL [ROOT]   exit 0 = the wheel is the tree; 1 = stale (one line says what differs).
"""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

PACKAGE = "astra_sglang"
# the committed part of an op folder that the wheel carries (pyproject's package-data, _data/extracted/*/...)
OP_FILES = ("manifest.json", "reference.py", "inputs.py", "adapter.py", "validation.json")


def tree_path(root: Path, name: str) -> Path:
    """Where a wheel member lives in the checkout (_data/ holds links to the top-level patches/ and extracted/)."""
    data = f"{PACKAGE}/_data/"
    return root / name[len(data):] if name.startswith(data) else root / name


def expected(root: Path) -> set[str]:
    """Members a wheel built from this tree must hold: the package's modules, patches, op-contract files."""
    names = {f"{PACKAGE}/{p.relative_to(root / PACKAGE)}" for p in (root / PACKAGE).rglob("*.py")
             if "__pycache__" not in p.parts and "_data" not in p.relative_to(root / PACKAGE).parts}
    names |= {f"{PACKAGE}/_data/{p.relative_to(root)}" for p in (root / "patches").glob("*/*/*") if p.is_file()}
    for op in (root / "extracted").glob("*/"):
        names |= {f"{PACKAGE}/_data/extracted/{op.name}/{f}" for f in OP_FILES if (op / f).is_file()}
    return names


def differences(wheel: Path, root: Path, patches_elsewhere: bool = False) -> list[str]:
    """``patches_elsewhere``: the wheel's patches are not what will be served, so they are not compared."""
    skip = f"{PACKAGE}/_data/patches/" if patches_elsewhere else "\0"
    with zipfile.ZipFile(wheel) as z:
        members = [n for n in z.namelist()
                   if n.startswith(f"{PACKAGE}/") and not n.endswith("/") and not n.startswith(skip)]
        diff = [f"changed: {n}" for n in members
                if not tree_path(root, n).is_file() or tree_path(root, n).read_bytes() != z.read(n)]
    diff += [f"missing: {n}" for n in sorted(expected(root) - set(members)) if not n.startswith(skip)]
    return diff


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2:
        print(__doc__.strip().splitlines()[-1])
        return 2
    wheel, root = Path(argv[0]), Path(argv[1] if len(argv) > 1 else ".")
    diff = differences(wheel, root, patches_elsewhere=bool(os.environ.get("ASTRA_SGLANG_PATCHES_DIR")))
    if diff:
        print(f"{wheel.name} is not this tree ({len(diff)} file(s): {'; '.join(diff[:4])}"
              f"{' ...' if len(diff) > 4 else ''}): rebuild it (pip wheel --no-deps -w .srv .)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
