"""Run ON THE H200 (site.sh does, before any evaluation): can a worker start CUDA inside the sandbox it gets by
default on a GPU (and with ``--both``, inside both layers)? Each in a fresh process, as the judge starts its
worker (about 5 s each). Prints one line each; exits 1 when the default fails, so site.sh can keep the worker's
capabilities (the escape hatch, ASTRA_SGLANG_SANDBOX_KEEP_CAPS=1) instead of failing every evaluation of the call
(as Landlock did, 2026-12-05).
Usage: python3 scripts/device/sandbox_probe.py [--both]"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from astra_sglang.harness.shared import sandbox

CHILD = ("import json; from astra_sglang.harness.shared import sandbox; level = sandbox.install(); import torch; "
         "ok = float(torch.ones(4, device='cuda').sum()) == 4.0; print(json.dumps({'level': level, 'cuda': ok}))")


def probe(extra: dict[str, str]) -> dict[str, object]:
    scratch = sandbox.make_scratch()
    try:
        env = {**os.environ, **sandbox.worker_env(scratch, "cuda"), **extra}
        done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
        lines = done.stdout.strip().splitlines()
        if done.returncode == 0 and lines:
            return dict(json.loads(lines[-1]))
        return {"cuda": False, "error": (done.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> int:
    default = probe({})
    print(f"sandbox probe, GPU default: {default}")
    if "--both" in sys.argv[1:]:
        print(f"sandbox probe, both layers (ASTRA_SGLANG_SANDBOX=1): {probe({sandbox.SANDBOX_ENV: '1'})}")
    return 0 if default.get("cuda") else 1


if __name__ == "__main__":
    sys.exit(main())
