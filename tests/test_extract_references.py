"""Each extracted reference agrees with SGLang: its forward_native where one exists, else its Triton kernel
(TRITON_INTERPRET=1, in a subprocess so the env var is set before triton is imported)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sglang")
import torch  # noqa: E402

from astra_sglang.contract.op import load_manifest  # noqa: E402

OPS = ["silu_and_mul", "fused_add_rmsnorm", "merge_state", "softcap_inplace_logits", "gelu_and_mul",
       "silu_and_mul_with_activation_rounding"]


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from astra_sglang.extract.extractor import extract

    root = tmp_path_factory.mktemp("extracted")
    extract(OPS, root)
    return root


def _reference(op: Path):
    m = load_manifest(op)
    spec = importlib.util.spec_from_file_location(f"ref_{op.name}", op / m.reference.path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return m, getattr(mod, m.reference.function)


def _close(m, dtype: torch.dtype, got: torch.Tensor, want: torch.Tensor) -> None:
    tol = m.tolerances[str(dtype).removeprefix("torch.")]
    torch.testing.assert_close(got.float(), want.float(), atol=tol.atol, rtol=tol.rtol, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_silu_reference_matches_forward_native(out: Path, dtype: torch.dtype) -> None:
    from sglang.kernels.ops.activation import _SILU_AND_MUL

    m, ref = _reference(out / "silu_and_mul")
    assert m.reference.forward_native == "sglang.kernels.ops.activation:_SILU_AND_MUL.forward_native"
    x = torch.randn(37, 2 * 1376, generator=torch.Generator().manual_seed(0)).to(dtype) * 3
    _close(m, dtype, _SILU_AND_MUL.forward_native(x), ref(input=x)["out"])


def test_a_wrong_reference_would_be_caught(out: Path) -> None:
    from sglang.kernels.ops.activation import _SILU_AND_MUL

    m, _ = _reference(out / "gelu_and_mul")  # gelu, not silu
    _, ref = _reference(out / "gelu_and_mul")
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    with pytest.raises(AssertionError):
        _close(m, torch.bfloat16, _SILU_AND_MUL.forward_native(x), ref(input=x)["out"])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_add_rmsnorm_reference_matches_rmsnorm_forward_native(out: Path, dtype: torch.dtype) -> None:
    from astra_sglang.extract.sglang_env import install_cpu_shims

    install_cpu_shims()
    from sglang.srt.layers.layernorm import RMSNorm

    m, ref = _reference(out / "fused_add_rmsnorm")
    g = torch.Generator().manual_seed(2)
    h = 512
    layer = RMSNorm(h, eps=1e-6).to(dtype)
    with torch.no_grad():
        layer.weight.copy_(torch.rand(h, generator=g) + 0.5)
    x = torch.randn(9, h, generator=g).to(dtype)
    r = torch.randn(9, h, generator=g).to(dtype)
    want = ref(input=x.clone(), residual=r.clone(), weight=layer.weight.detach(), eps=1e-6)
    got_x, got_r = layer.forward_native(x.clone(), r.clone())
    _close(m, dtype, got_x, want["input"])
    _close(m, dtype, got_r, want["residual"])


_MERGE_SCRIPT = r"""
import importlib.util, json, sys, math
import torch
from pathlib import Path
op = Path(sys.argv[1]); mode = sys.argv[2]
m = json.loads((op / "manifest.json").read_text())
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod); return mod
if mode == "extracted":
    kernel = getattr(load(op / m["recipe"]["source"], "extracted_kernel"), m["recipe"]["wrapper"])
else:
    from sglang.kernels.ops.attention.merge_state import merge_state_triton as kernel
ref = load(op / m["reference"]["path"], "ref").reference
g = torch.Generator().manual_seed(0)
results = []
for dtype, (t, nh, d) in [(torch.float32, (4, 3, 96)), (torch.bfloat16, (3, 2, 128)), (torch.float16, (2, 4, 64))]:
    args = {
        "prefix_output": torch.randn(t, nh, d, generator=g).to(dtype),
        "prefix_lse": torch.randn(t, nh, generator=g) * 4,
        "suffix_output": torch.randn(t, nh, d, generator=g).to(dtype),
        "suffix_lse": torch.randn(t, nh, generator=g) * 4,
    }
    args["prefix_lse"][0, 0] = math.inf      # empty prefix -> suffix wins
    args["suffix_lse"][0, 1] = -math.inf     # empty suffix -> prefix wins
    args["prefix_lse"][1, 0] = -math.inf
    args["suffix_lse"][1, 0] = -math.inf     # both empty -> NaN in kernel and reference
    args["output"] = torch.empty_like(args["prefix_output"])
    args["output_lse"] = torch.empty_like(args["prefix_lse"])
    kernel(*[args[n] for n in m["recipe"]["call"]])
    want = ref(**args)
    tol = m["tolerances"][str(dtype).removeprefix("torch.")]
    for name in ("output", "output_lse"):
        torch.testing.assert_close(args[name].float(), want[name], atol=tol["atol"], rtol=tol["rtol"], equal_nan=True)
    assert torch.equal(args["output"][0, 0], args["suffix_output"][0, 0])
    assert torch.isnan(args["output_lse"][1, 0])
    results.append(str(dtype))
imported = any(k == "sglang" or k.startswith("sglang.") for k in sys.modules)
print(json.dumps({"ok": results, "sglang_imported": imported}))
"""


def _interpret(op: Path, mode: str) -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", _MERGE_SCRIPT, str(op), mode], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_extracted_merge_state_runs_standalone_and_matches_reference(out: Path) -> None:
    result = _interpret(out / "merge_state", "extracted")
    assert result["ok"] == ["torch.float32", "torch.bfloat16", "torch.float16"]
    assert result["sglang_imported"] is False


def test_sglang_merge_state_matches_the_same_reference(out: Path) -> None:
    result = _interpret(out / "merge_state", "sglang")
    assert len(result["ok"]) == 3 and result["sglang_imported"] is True
