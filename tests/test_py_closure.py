"""Triton sources that import SGLang run stand-alone: their SGLang closure is vendored into the op folder and
imported under a private package name in processes where ``import sglang`` fails."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from astra_sglang.contract.op import PyClosure, PyModule
from astra_sglang.errors import AstraError
from astra_sglang.loader.pyimport import import_closure

ROOT = Path(__file__).resolve().parents[1]
NEEDED = ["attention.decode_attention_fwd", "attention.extend_attention_fwd", "moe.fused_moe_kernel",
          "quantization.sglang_per_token_quant_fp8"]
# Measured on SGLang 0.5.23 (CPU, no GPU driver): 294 of the 308 Triton ops with @triton.jit kernels load.
MEASURED_LOADABLE = 294
FUSED_MOE_LORA_REFUSAL = (
    "sglang.kernels.ops.lora.moe.fused_moe_lora_kernel:7 imports tensor_model_parallel_all_gather from "
    "sglang.srt.distributed, which is torch.distributed process-group state: cannot run stand-alone")
# A child process where importing SGLang fails: torch and triton still import.
NO_SGLANG = """
import importlib.abc, sys
class _NoSglang(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "sglang" or name.startswith("sglang."):
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, _NoSglang())
"""


# ------------------------------------------------------------------------------ loader (no SGLang needed)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_pruned_modules_run_only_their_kept_statements_and_left_out_imports_fail_when_used(tmp_path):
    _write(tmp_path / "src/kernels/k.py", "from sglang.srt.helpers import double, MISSING\n"
                                          "import sglang.srt.helpers\n"
                                          "def run(x):\n    return double(x) + sglang.srt.helpers.double(1)\n")
    _write(tmp_path / "src/srt/helpers.py", "import os, json\n"
                                            "raise RuntimeError('the server')\n"
                                            "def double(x):\n    return 2 * x\n"
                                            "if os.sep:\n    from sglang.srt.jit import MISSING\n")
    closure = PyClosure(modules=[
        PyModule(name="sglang.kernels.k", path="src/kernels/k.py"),
        PyModule(name="sglang.srt.helpers", path="src/srt/helpers.py", keep_lines=[1, 3, 5],
                 import_subset={1: ["os"]}, left_out={6: "sglang.srt.jit is SGLang's CUDA JIT builder"}),
    ])
    module = import_closure(tmp_path, closure)
    assert module.run(3) == 8
    assert "json" not in vars(sys.modules[module.__name__.rsplit(".", 2)[0] + ".srt.helpers"])
    with pytest.raises(ImportError, match="MISSING was not vendored with this kernel: sglang.srt.jit is SGLang's"):
        module.MISSING()
    assert not module.__name__.startswith("sglang") and module.__name__.endswith(".kernels.k")


def test_an_import_outside_the_closure_names_the_sglang_module(tmp_path):
    _write(tmp_path / "src/kernels/k.py", "from sglang.srt.server_args import ServerArgs\n")
    closure = PyClosure(modules=[PyModule(name="sglang.kernels.k", path="src/kernels/k.py")])
    with pytest.raises(AstraError, match="ModuleNotFoundError: sglang.srt is not in the op folder.s vendored closure"):
        import_closure(tmp_path, closure)


# ------------------------------------------------------------------------------ against the installed SGLang


@pytest.fixture(scope="module")
def sglang_triton_ops() -> list[str]:
    pytest.importorskip("sglang")
    from astra_sglang.extract.discovery import triton_module
    from astra_sglang.extract.sglang_env import require_sglang

    require_sglang()
    from sglang.kernels.registry import registry

    targets = {s.op: s.target for s in registry.all_specs() if s.backend.value == "triton"}
    return sorted(op for op, target in targets.items() if triton_module(target) is not None)


def test_every_vendored_triton_op_loads_in_a_process_without_sglang(sglang_triton_ops):
    from astra_sglang.extract.standalone_check import check_load

    results = check_load(sglang_triton_ops, timeout=600)
    loaded = [op for op, (ok, _) in results.items() if ok]
    print(f"\nstand-alone: {len(loaded)} of {len(results)} Triton ops load without SGLang")
    assert len(results) == len(sglang_triton_ops) >= 300
    assert len(loaded) >= 0.8 * MEASURED_LOADABLE
    assert all(why for ok, why in results.values() if not ok)
    assert all(results[op][0] for op in NEEDED), {op: results[op] for op in NEEDED}


def test_a_closure_that_needs_distributed_state_is_refused_with_the_exact_line(tmp_path):
    pytest.importorskip("sglang")
    from astra_sglang.extract.extractor import vendor_triton_sources
    from astra_sglang.extract.py_closure import python_closure

    assert python_closure("sglang.kernels.ops.lora.moe.fused_moe_lora_kernel").refusal == FUSED_MOE_LORA_REFUSAL
    done = vendor_triton_sources("lora.fused_moe_lora", tmp_path / "op")
    assert done.refusal == ("lora.fused_moe_lora: the SGLang imports of sglang.kernels.ops.lora.moe."
                            f"fused_moe_lora_kernel cannot be vendored: {FUSED_MOE_LORA_REFUSAL}")
    assert not (tmp_path / "op").exists() and not done.files


DECODE_RUN = NO_SGLANG + """
import json, os, torch
from pathlib import Path
from astra_sglang.contract.op import PyClosure
from astra_sglang.loader.pyimport import import_closure
job = json.loads(Path(sys.argv[1]).read_text())
m = import_closure(Path(job["dir"]), PyClosure.model_validate(job["closure"]))
torch.manual_seed(0)
B, H, D, N, S = 2, 2, 16, 12, 2
q, k, v = torch.randn(B, H, D), torch.randn(N, H, D), torch.randn(N, H, D)
kv_indices = torch.tensor([0, 2, 4, 6, 8, 1, 3, 5], dtype=torch.int32)
kv_indptr = torch.tensor([0, 5, 8], dtype=torch.int32)
o, logits, lse = torch.empty(B, H, D), torch.empty(B, H, S, D), torch.empty(B, H, S)
scale = D ** -0.5
m.decode_attention_fwd(q, k, v, o, kv_indptr, kv_indices, logits, lse, torch.full((B,), S, dtype=torch.int32), S,
                       scale, 1.0, 1.0)
ref = torch.empty_like(o)
for b in range(B):
    idx = kv_indices[kv_indptr[b]:kv_indptr[b + 1]].long()
    w = torch.softmax(torch.einsum("hd,nhd->hn", q[b], k[idx]) * scale, dim=-1)
    ref[b] = torch.einsum("hn,nhd->hd", w, v[idx])
print(json.dumps({"max_err": (o - ref).abs().max().item(), "sglang": "sglang" in sys.modules}))
"""


def test_vendored_decode_attention_runs_under_the_interpreter_without_sglang(tmp_path):
    """Both stages of SGLang's decode attention (split-KV partials, then the log-sum-exp merge) from the
    vendored closure, on CPU: the result is softmax(q k^T * scale) v over each request's KV indices."""
    pytest.importorskip("sglang")
    from astra_sglang.extract.extractor import vendor_triton_sources

    done = vendor_triton_sources("attention.decode_attention_fwd", tmp_path / "op")
    assert done.refusal is None and done.closure is not None and done.wrapper == "decode_attention_fwd"
    assert {m.name for m in done.closure.modules} >= {"sglang.srt.environ", "sglang.srt.utils.common"}
    assert all(f.origin.startswith("sglang:") and not f.committed for f in done.files)
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"dir": str(tmp_path / "op"), "closure": done.closure.model_dump()}))
    r = subprocess.run([sys.executable, "-c", DECODE_RUN, str(job)], capture_output=True, text=True, timeout=300,
                       env={**__import__("os").environ, "TRITON_INTERPRET": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["max_err"] < 1e-5 and out["sglang"] is False


def _vendored_folder(tmp_path: Path) -> Path:
    """An op folder whose Triton recipe runs decode_attention_fwd with its vendored closure (a test fixture:
    another op's contract with the files and recipe replaced)."""
    from astra_sglang.contract.op import TritonRecipe, load_manifest, write_manifest
    from astra_sglang.extract.extractor import vendor_triton_sources

    op = tmp_path / "decode"
    done = vendor_triton_sources("attention.decode_attention_fwd", op)
    assert done.closure is not None and done.source is not None
    base = load_manifest(ROOT / "extracted" / "merge_state")
    ref = next(f for f in base.files if f.role == "reference")
    (op / ref.path).write_bytes((ROOT / "extracted" / "merge_state" / ref.path).read_bytes())
    recipe = TritonRecipe(source=done.source, wrapper="decode_attention_fwd", kernels=done.kernels, call=[],
                          closure=done.closure)
    write_manifest(op, base.model_copy(update={"files": [*done.files, ref], "recipe": recipe}))
    return op


def test_extract_restore_refills_a_deleted_vendored_module_and_refuses_a_changed_hash(tmp_path, capsys):
    pytest.importorskip("sglang")
    from astra_sglang.cli.main import main
    from astra_sglang.contract.op import load_manifest, write_manifest
    from astra_sglang.loader.pyimport import load_triton_wrapper

    op = _vendored_folder(tmp_path)
    environ = op / "src/srt/environ.py"
    environ.unlink()
    assert main(["extract", "--restore", "--out", str(tmp_path)]) == 0
    assert "verified (1 file(s) restored)" in capsys.readouterr().out and environ.is_file()
    manifest = load_manifest(op)
    fn = load_triton_wrapper(op / manifest.recipe.source, "decode_attention_fwd",  # type: ignore[union-attr]
                             closure=manifest.recipe.closure, op_dir=op)  # type: ignore[union-attr]
    assert fn.__module__.startswith("astra_vendored_")

    files = [f.model_copy(update={"sha256": "0" * 64}) if f.path == "src/srt/environ.py" else f
             for f in manifest.files]
    write_manifest(op, manifest.model_copy(update={"files": files}))
    assert main(["extract", "--restore", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "src/srt/environ.py: SHA-256 of the installed" in err and "differs" in err
