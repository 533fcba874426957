"""Run ON THE H200 (site.sh and ship_check.sh do, before any evaluation): do CUDA and a Triton kernel start inside the
sandbox a worker gets by default on a GPU (seccomp, the read-only mounts, no capabilities)? If not, the first weaker
setting under which they do, printed on stdout as the shell line that sets it for the call (nothing when the default works), so
one unforeseen need of the driver costs the call's sandbox one layer, said in every verdict's level, instead of
failing every evaluation of the call (as Landlock did, 2026-12-05). Each try in a fresh process, as the judge
starts its worker (about 5 s each); what each try gave goes to stderr. With ``--both``, also inside Landlock.
Usage: eval "$(python3 scripts/device/sandbox_probe.py [--both])"
``ASTRA_SGLANG_PROBE_CHECK`` (tests): Python code to run inside instead of CUDA and a Triton kernel."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys

from astra_sglang.harness.shared import sandbox

# what a worker does first on the GPU: start the driver, then build and launch a Triton kernel (ptxas, the C
# compiler for Triton's launcher stub, the libcuda lookup, the worker's own Triton cache)
CUDA = """
import torch, triton, triton.language as tl

@triton.jit
def _double(x, y, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + i, tl.load(x + i, mask=i < n) * 2, mask=i < n)

x = torch.arange(1000, device="cuda", dtype=torch.float32)
y = torch.empty_like(x)
_double[(4,)](x, y, 1000, BLOCK=256)
assert torch.equal(y, x * 2)
"""
CHILD = """import json
from astra_sglang.harness.shared import sandbox
level = sandbox.install()
{check}
print(json.dumps({{'level': level, 'ok': True}}))
"""
# weaker each step: the read-only mounts off, then the capabilities kept too (seccomp alone stays)
FALLBACKS = ({sandbox.SANDBOX_ENV: "seccomp"}, {sandbox.SANDBOX_ENV: "seccomp", sandbox.KEEP_CAPS_ENV: "1"})


def _why(stderr: str) -> str:
    """The child's last words without the traceback's frames: what a compiler it ran printed comes before the
    traceback and says why (the last line alone, "CalledProcessError: Command '[gcc ...", did not; 2026-12-05)."""
    lines = [ln for ln in stderr.strip().splitlines()
             if ln.strip() and not ln.startswith(("  File ", "    ", "Traceback ")) and not set(ln.strip()) <= set("^~")]
    return " | ".join(lines[-10:])[-1500:] or "no output"


def probe(extra: dict[str, str], check: str) -> dict[str, object]:
    scratch = sandbox.make_scratch()
    try:
        env = {**os.environ, **sandbox.worker_env(scratch, "cuda"), **extra}
        child = scratch / "probe.py"  # a file: triton.jit reads its kernel's source
        child.write_text(CHILD.format(check=check))
        done = subprocess.run([sys.executable, str(child)], env=env, capture_output=True, text=True, timeout=180)
        lines = done.stdout.strip().splitlines()
        if done.returncode == 0 and lines:
            return dict(json.loads(lines[-1]))
        return {"ok": False, "error": _why(done.stderr)}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> int:
    check = os.environ.get("ASTRA_SGLANG_PROBE_CHECK", CUDA)
    asked = {k: os.environ[k] for k in (sandbox.SANDBOX_ENV, sandbox.KEEP_CAPS_ENV) if os.environ.get(k)}
    # the machine, for the record: Landlock ran CUDA on the H100 (Firecracker, kernel 6.18.44-fc) and failed it
    # on an H200 whose kernel nobody wrote down (2026-12-05): the runtime may be what differs
    print(f"sandbox probe, machine: kernel {platform.release()}, Landlock ABI {sandbox.landlock_abi()}", file=sys.stderr)
    default = probe({}, check)
    print(f"sandbox probe, GPU default{' ' + str(asked) if asked else ''}: {default}", file=sys.stderr)
    if "--both" in sys.argv[1:]:
        both = probe({sandbox.SANDBOX_ENV: "1"}, check)
        print(f"sandbox probe, landlock+seccomp ({sandbox.SANDBOX_ENV}=1): {both}", file=sys.stderr)
    if default.get("ok") or asked:  # a setting the caller chose stands: said, not changed
        return 0 if default.get("ok") else 1
    for extra in FALLBACKS:
        got = probe(extra, check)
        print(f"sandbox probe, {extra}: {got}", file=sys.stderr)
        if got.get("ok"):
            print(f"{os.path.basename(sys.argv[0])}: CUDA does not start in the default GPU sandbox; this call's "
                  f"workers run with {extra}", file=sys.stderr)
            print("export " + " ".join(f"{k}={v}" for k, v in extra.items()))
            return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
