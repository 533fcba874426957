"""``astra-sglang repin OP --old MANIFEST``: move the validation records and patches pinned to an op's previous
manifest onto its current one, only when the two differ in nothing but an op id renamed to the one form."""

from __future__ import annotations

import argparse
from pathlib import Path

WHY = ("issue 24, one op-id form: the op id was renamed to its 'family.name' form (contract.op.canonical_op_id); "
       "the manifest differs from the pinned one in nothing else, so the GPU verdict pinned to it still holds")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "repin", help="re-pin validation records and patches across an op-id rename (no GPU needed)",
        description="Loads OP's previous manifest (--old, e.g. `git show REV:extracted/OP/manifest.json > old.json`) "
                    "and its current one, refuses unless they differ in nothing but the op id, renamed to the one "
                    "'family.name' form, then moves every record of OP/validation.json and every patch of OP pinned "
                    "to the old digest onto the new one, writing the re-pin (from, to, both op ids, why) into each. "
                    "Any other difference needs the GPU again (`validate-contract`, `patches verify --record`).")
    p.add_argument("op", metavar="OP", help="extracted op short name, op id or folder")
    p.add_argument("--old", type=Path, required=True, help="the previous manifest.json (or a folder holding one)")
    p.add_argument("--why", help="why the pins move, written into each re-pin (when not given: a sentence saying the "
                   "op id was renamed to its one form and nothing else changed)")
    p.add_argument("--dry-run", action="store_true", help="prove and say what would move; write nothing")
    p.add_argument("--extracted", type=Path, default=Path("extracted"), help="extracted ops root (default: extracted/)")
    p.add_argument("--patches", type=Path, help="patch registry (default: $ASTRA_SGLANG_PATCHES_DIR or the bundled one)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from astra_sglang.contract.base import read_versioned
    from astra_sglang.contract.op import (
        MANIFEST_NAME,
        SCHEMA_VERSION,
        Manifest,
        ManifestError,
        find_op_dir,
        load_manifest,
    )
    from astra_sglang.contract.repin import prove_rename, repin_patch, repin_validations
    from astra_sglang.contract.validation import read_validations
    from astra_sglang.errors import AstraError
    from astra_sglang.patches.registry import discover, patches_root

    op_dir = find_op_dir(args.op, args.extracted)
    old_path = args.old / MANIFEST_NAME if args.old.is_dir() else args.old
    if not old_path.is_file():
        raise AstraError(f"--old {args.old}: no manifest there")
    old = read_versioned(old_path, Manifest, SCHEMA_VERSION, ManifestError, "manifest")
    new = load_manifest(op_dir)
    if old.short_name != new.short_name:
        raise AstraError(f"--old {args.old} is the manifest of {old.short_name}, not of {new.short_name}")
    r = prove_rename(old, new, args.why or WHY)
    root = args.patches if args.patches is not None else patches_root()
    patches = [e for e in discover(root) if e.manifest is not None and e.manifest.op == new.short_name
               and e.manifest.op_manifest_sha256 == r.from_sha256]
    head = (f"{new.short_name}: manifest {r.from_sha256[:12]} -> {r.to_sha256[:12]} differs only in its op id, now "
            f"{new.op_id}")
    if args.dry_run:
        vf = read_validations(op_dir)
        pinned = sum(v.manifest_sha256 == r.from_sha256 for v in vf.validations) if vf else 0
        print(f"{head}; would re-pin {pinned} validation record(s) and {len(patches)} patch(es)"
              + (f": {', '.join(e.patch_id for e in patches)}" if patches else ""))
        return 0
    moved = repin_validations(op_dir, r)
    done = [e.patch_id for e in patches if repin_patch(e.path, r)]
    print(f"{head}; re-pinned {moved} validation record(s) and {len(done)} patch(es)"
          + (f": {', '.join(done)}" if done else ""))
    return 0
