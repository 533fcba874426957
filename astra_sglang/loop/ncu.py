"""Optional Nsight Compute counters for the Profiling agent (``--ncu``): one launch of the current kernel.

``ncu --clock-control none`` keeps the clocks as the harness times them (h200.md). Where there is no ncu or
no GPU the tool says so in one line and the agent diagnoses from timing and the resource report.
Run as ``python -m astra_sglang.loop.ncu OP_DIR CANDIDATE|- DTYPE DIMS_JSON``: the profiled target.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

from astra_sglang.contract.op import Manifest, load_manifest
from astra_sglang.loop.records import EvalSpec

SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "MemoryWorkloadAnalysis")


def _ncu() -> str | None:
    return shutil.which("ncu") or next((str(p) for p in (Path("/usr/local/cuda/bin/ncu"),) if p.exists()), None)


def _shape(manifest: Manifest, spec: EvalSpec) -> dict[str, int]:
    tagged = [s.dims for s in manifest.shapes if spec.shapes in s.tags]
    return (tagged or [s.dims for s in manifest.shapes])[0]


def profile_with_ncu(op_dir: Path, manifest: Manifest, candidate: Path | None, spec: EvalSpec,
                     timeout_s: float = 300.0) -> str:
    ncu = _ncu()
    if ncu is None:
        return "Nsight Compute (ncu) is not installed on this host: no counters; use run_timing and resource_report"
    try:
        import torch

        if not torch.cuda.is_available():
            return "no GPU on this host: no Nsight Compute counters"
    except ImportError:
        return "torch is not installed on this host: no Nsight Compute counters"
    dims = _shape(manifest, spec)
    dtype = "bfloat16" if "bfloat16" in manifest.signature.dtypes else manifest.signature.dtypes[0]
    cmd = [ncu, "--clock-control", "none", "--csv", "--page", "details", "--launch-skip", "2", "--launch-count", "1"]
    for s in SECTIONS:
        cmd += ["--section", s]
    cmd += [sys.executable, "-m", "astra_sglang.loop.ncu", str(op_dir), str(candidate) if candidate else "-", dtype,
            json.dumps(dims)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"ncu timed out after {timeout_s:.0f} s"
    if proc.returncode != 0:
        return f"ncu failed (exit {proc.returncode}): {(proc.stderr or proc.stdout)[-1500:]}"
    return summarize(proc.stdout, dims, dtype)


def summarize(csv_text: str, dims: dict[str, int], dtype: str) -> str:
    start = csv_text.find('"ID"')
    rows = list(csv.DictReader(io.StringIO(csv_text[start:]))) if start >= 0 else []
    if not rows:
        return "ncu produced no counters (the kernel may not have launched)"
    lines = [f"Nsight Compute, one launch at {dims} {dtype}, kernel {rows[0].get('Kernel Name', '?')}:"]
    for row in rows:
        name, unit, value = row.get("Metric Name"), row.get("Metric Unit", ""), row.get("Metric Value")
        if name and value:
            lines.append(f"{row.get('Section Name', '')}: {name} = {value} {unit}".strip())
    return "\n".join(lines[:80])


def _target(op_dir: str, candidate: str, dtype: str, dims_json: str) -> None:
    """Launch the kernel a few times on random inputs (ncu profiles the third launch)."""
    import torch

    from astra_sglang.harness.shared.suite import shape_of
    from astra_sglang.loader.launch import make_launcher

    manifest = load_manifest(Path(op_dir))
    dims = json.loads(dims_json)
    launch = make_launcher(Path(op_dir), manifest, dtype, kernel_source=None if candidate == "-" else Path(candidate))
    args: dict[str, object] = dict(dims)
    for t in manifest.signature.tensors:
        tdtype = getattr(torch, t.dtype.replace("{dtype}", dtype))
        args[t.name] = torch.randn(shape_of(t.shape, dims), device="cuda").to(tdtype)
    for s in manifest.signature.scalars:
        args[s.name] = s.default
    for _ in range(4):
        launch(args)
    torch.cuda.synchronize()


if __name__ == "__main__":
    _target(*sys.argv[1:5])
