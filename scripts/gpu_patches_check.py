#!/usr/bin/env python
"""On-GPU proof for every patch (or the ids given), on a host WITHOUT SGLang (the H200).

For each patch: the kernel loaded by the plugin's own code from patches/ (guard, adapter, loader, counters,
activation check) against SGLang's original rebuilt from extracted/<op>/ by astra_sglang.loader: covered
shapes eagerly and under CUDA-graph capture/replay with fresh inputs, calls outside the guard reaching the
original (counters), and CUDA-graph replay times. HookRegistry itself is covered by the CPU tests.

    python scripts/gpu_patches_check.py [PATCH_ID ...] [--json OUT.json] [--record] [--no-time]

--record: for each patch that passed and is not slower than the original on any timed shape, add this arch and the extracted folder's SGLang version to the
manifest's validated_on (the plugin then uses the patch on this arch). Exit 1 if any patch failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MIN_SPEEDUP = 0.98  # CUDA-graph replay medians; below this on any covered shape the patch is not recorded


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("patch_ids", nargs="*")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--no-time", action="store_true")
    args = ap.parse_args(argv)

    from astra_sglang.contract.op import load_manifest
    from astra_sglang.contract.patch import write_patch_manifest
    from astra_sglang.patches.tooling.devcheck import check_on_device
    from astra_sglang.patches.kernels import extracted_op_dir
    from astra_sglang.patches.registry import discover

    entries = [e for e in discover() if not args.patch_ids or e.patch_id in args.patch_ids]
    if not entries:
        print("no patches found", file=sys.stderr)
        return 2
    reports, failed = [], 0
    for e in entries:
        r = check_on_device(e, time_it=not args.no_time)
        reports.append(r.as_dict())
        failed += not r.ok
        print(f"== {r.patch_id}: {'PASS' if r.ok else 'FAIL'} on {r.arch}: {r.detail}")
        for s in r.shapes:
            t = (f"original {s.original_us:.2f} us, patch {s.patch_us:.2f} us, {s.speedup:.3f}x"
                 if s.speedup else "")
            print(f"   {s.dims} {s.dtype}: eager {'ok' if not s.eager else s.eager}; "
                  f"graph {'ok' if not s.graph else s.graph}; {t}")
        print(f"   outside guard: {r.outside_guard}; counters {r.counters}")
        slow = [s for s in r.shapes if s.speedup is not None and s.speedup < MIN_SPEEDUP]
        if r.ok and args.record and (slow or args.no_time):
            print(f"   not recorded: {'timing skipped' if args.no_time else f'slower than the original on {len(slow)} shape(s)'}"
                  " (a patch must never make SGLang slower)")
        elif r.ok and args.record and e.manifest is not None and r.arch:
            m = e.manifest
            version = load_manifest(extracted_op_dir(m)).sglang_version
            if version not in m.validated_on.sglang_versions:
                m.validated_on.sglang_versions.append(version)
            if r.arch not in m.validated_on.archs:
                m.validated_on.archs.append(r.arch)
            m.evidence.notes.append(f"scripts/gpu_patches_check.py on {r.arch}: matches the extracted SGLang "
                                    f"{version} original eagerly and under CUDA-graph replay; "
                                    + "; ".join(f"{s.dims} {s.dtype} {s.speedup:.3f}x" for s in r.shapes if s.speedup))
            write_patch_manifest(e.path, m)
            print(f"   recorded: validated on SGLang {version} / {r.arch}")
    if args.json:
        args.json.write_text(json.dumps(reports, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
