"""Whether vendored Triton closures really import without SGLang: vendor each op into a temporary folder and
import them all in one subprocess where ``import sglang`` fails (``loader.standalone_probe``).

Slower than discovery's static answer (seconds per hundred ops), so it runs for ``extract --list --check-load``
and the tests, not for every ``--list``.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.extract.discovery import OpInfo
from astra_sglang.extract.extractor import vendor_triton_sources


def _top_level_kernels(path: Path, kernels: list[str]) -> list[str]:
    """Kernels defined at the top of the module (a kernel built inside a function is not a module attribute)."""
    top = {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)}
    return [k for k in kernels if k in top]


def check_load(op_ids: list[str], timeout: float = 900.0) -> dict[str, tuple[bool, str]]:
    """op id -> (loads stand-alone, why not), for Triton ops; one subprocess for all of them."""
    results: dict[str, tuple[bool, str]] = {}
    with tempfile.TemporaryDirectory(prefix="astra-check-load-") as tmp:
        jobs: list[dict[str, object]] = []
        by_source: dict[tuple[str | None, str | None], list[str]] = {}
        for i, op in enumerate(op_ids):
            dest = Path(tmp) / f"op{i}"
            done = vendor_triton_sources(op, dest)
            if done.refusal or done.source is None:
                results[op] = (False, done.refusal or "no Triton source")
                continue
            key = (done.module, done.wrapper)
            if key in by_source:  # the same module and wrapper: probe once
                by_source[key].append(op)
                continue
            by_source[key] = [op]
            jobs.append({"key": op, "dir": str(dest), "source": done.source, "wrapper": done.wrapper,
                         "closure": done.closure.model_dump() if done.closure else None,
                         "kernels": _top_level_kernels(dest / done.source, done.kernels)})
        jobs_file, out_file = Path(tmp) / "jobs.json", Path(tmp) / "results.json"
        jobs_file.write_text(json.dumps(jobs))
        try:
            proc = subprocess.run([sys.executable, "-m", "astra_sglang.loader.standalone_probe", str(jobs_file),
                                   str(out_file)], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc = None
        probed = json.loads(out_file.read_text()) if out_file.is_file() else {}
        if proc is None or proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["?"])[-1] if proc else f"timed out after {timeout:.0f} s"
            if not probed:
                raise AstraError(f"the stand-alone load check failed: {last}")
        for ops in by_source.values():
            ok, why = probed.get(ops[0], (False, "the probe process stopped before this op"))
            for op in ops:
                results[op] = (bool(ok), str(why))
    return results


def apply_check(infos: list[OpInfo], timeout: float = 900.0) -> None:
    """Replace the static stand-alone answer of every Triton op by the subprocess's."""
    triton = [i for i in infos if i.source_kind == "triton" and i.sources]
    checked = check_load([i.op_id for i in triton], timeout)
    for info in triton:
        ok, why = checked[info.op_id]
        info.standalone, info.standalone_reason, info.standalone_checked = ok, why, True
