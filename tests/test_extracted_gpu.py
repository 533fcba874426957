"""GPU checks of committed extracted folders that need no SGLang install (the H200 has none).

Run there after carrying the git-ignored SGLang files (`extract --restore` here, carry `extracted`).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_SOFTCAP_SCRIPT = r"""
import importlib.util, json, sys
import torch
from pathlib import Path
op = Path(sys.argv[1])
m = json.loads((op / "manifest.json").read_text())
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod); return mod
kernel = getattr(load(op / m["recipe"]["source"], "k"), m["recipe"]["wrapper"])
ref = load(op / m["reference"]["path"], "ref").reference
for dtype in (torch.float32, torch.bfloat16):
    logits = (torch.randn(3, 1500, generator=torch.Generator().manual_seed(0)) * 40).to(dtype).cuda()
    want = ref(logits=logits.clone(), softcap=30.0)["logits"]
    kernel(logits, 30.0)
    tol = m["tolerances"][str(dtype).removeprefix("torch.")]
    torch.testing.assert_close(logits.float(), want.float(), atol=tol["atol"], rtol=tol["rtol"])
print("sglang" in sys.modules)
"""


@pytest.mark.gpu  # not under TRITON_INTERPRET on CPU: Triton's interpreter lacks libdevice.tanh
def test_extracted_softcap_runs_standalone_and_matches_reference(restored_op) -> None:
    folder = restored_op("softcap_inplace_logits")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", _SOFTCAP_SCRIPT, str(folder)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "False"
