"""Import vendored Triton closures in a process where importing SGLang fails, and say which load.

Run as ``python -m astra_sglang.loader.standalone_probe JOBS.json RESULTS.json`` by ``extract --check-load``
and the tests: one process for many ops keeps it fast, and the finder installed first proves that nothing
reaches an installed SGLang (torch and triton still import).
"""

from __future__ import annotations

import importlib.abc
import json
import sys
from pathlib import Path
from typing import Any


class _NoSglang(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname == "sglang" or fullname.startswith("sglang."):
            raise ModuleNotFoundError(f"SGLang is blocked in this process ({fullname})", name=fullname)
        return None


def probe(job: dict[str, Any]) -> tuple[bool, str]:
    """(loads, why not) for one job: its module imports and its kernels and wrapper resolve."""
    from triton.runtime.jit import KernelInterface

    from astra_sglang.contract.op import PyClosure
    from astra_sglang.loader.pyimport import import_closure, import_path

    op_dir = Path(job["dir"])
    try:
        if job.get("closure"):
            module = import_closure(op_dir, PyClosure.model_validate(job["closure"]))
        else:
            module = import_path(op_dir / job["source"], prefix="astra_probe")
    except Exception as e:
        return False, str(e).splitlines()[0] if str(e) else type(e).__name__
    bad = [k for k in job["kernels"] if not isinstance(getattr(module, k, None), KernelInterface)]
    if bad:
        return False, f"@triton.jit kernel {bad[0]} does not resolve after import"
    wrapper = job.get("wrapper")
    if wrapper and not callable(getattr(module, wrapper, None)):
        return False, f"wrapper {wrapper} does not resolve after import"
    return True, ""


def main(argv: list[str]) -> int:
    sys.meta_path.insert(0, _NoSglang())
    jobs = json.loads(Path(argv[0]).read_text())
    results = {}
    for job in jobs:
        ok, why = probe(job)
        results[job["key"]] = [ok, why]
        Path(argv[1]).write_text(json.dumps(results))  # written as it goes: a crash keeps the ones before it
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
