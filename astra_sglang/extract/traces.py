"""Adding shapes recorded from a real workload (SGLang's fused-op trace) to an extracted folder.

The trace file is JSON: a list of records ``{"op": ..., "backend": ..., "tensor_args": ["torch.bfloat16[128, 4096]",
...]}``, i.e. ``msgspec.json.encode(sglang.kernels.fused_op.get_fused_op_trace())`` (or ``msgspec.to_builtins``).
Only records of the folder's op are used; the catalog entry maps their tensor shapes to the op's dims.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from astra_sglang.contract.op import (
    ManifestError,
    ShapeCase,
    load_manifest,
    write_manifest,
)
from astra_sglang.errors import AstraError
from astra_sglang.extract import catalog

_TENSOR = re.compile(r"^(?:torch\.)?(\w+)\[([\d,\s]*)\]$")


def parse_tensor_arg(text: str) -> tuple[str, list[int]]:
    m = _TENSOR.match(text.strip())
    if not m:
        raise AstraError(f"trace: cannot parse tensor description {text!r} (expected like 'torch.bfloat16[128, 4096]')")
    dims = [int(d) for d in m.group(2).split(",") if d.strip()]
    return m.group(1), dims


def add_trace(op_dir: Path, trace_file: Path) -> int:
    """Merge the traced shapes of this folder's op into its manifest; returns how many new cases were added."""
    try:
        manifest = load_manifest(op_dir)
    except ManifestError as e:
        raise AstraError(str(e)) from None
    entry = catalog.find(manifest.op_id)
    if entry is None or entry.trace_dims is None:
        raise AstraError(f"{manifest.short_name}: no trace mapping for this op in the catalog")
    try:
        records = json.loads(Path(trace_file).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise AstraError(f"cannot read trace {trace_file}: {e}") from None
    if not isinstance(records, list):
        raise AstraError(f"trace {trace_file}: expected a JSON list of fused-op trace records")
    names = {manifest.op_id, manifest.short_name, *entry.aliases}
    known = {tuple(sorted(s.dims.items())) for s in manifest.shapes}
    added = 0
    for rec in records:
        if not isinstance(rec, dict) or rec.get("op") not in names:
            continue
        dims = entry.trace_dims([parse_tensor_arg(t) for t in rec.get("tensor_args", [])])
        if dims is None or tuple(sorted(dims.items())) in known:
            continue
        known.add(tuple(sorted(dims.items())))
        manifest.shapes.append(ShapeCase(dims=dims, tags=["traced"], source=f"trace {Path(trace_file).name} "
                                         f"(backend {rec.get('backend', '?')})"))
        added += 1
    write_manifest(op_dir, manifest)
    return added
