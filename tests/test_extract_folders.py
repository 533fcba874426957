"""The three paper ops extract into complete, hash-pinned, self-contained folders (CPU, installed sglang 0.5.23)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("sglang")

from astra_sglang.contract.base import sha256_file as sha256  # noqa: E402
from astra_sglang.contract.op import CudaJitRecipe, TritonRecipe, load_manifest  # noqa: E402
from astra_sglang.extract.closure import includes_of  # noqa: E402

PAPER = ["silu_and_mul", "fused_add_rmsnorm", "merge_state"]


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from astra_sglang.extract.extractor import extract

    root = tmp_path_factory.mktemp("extracted")
    extract(PAPER, root)
    return root


@pytest.mark.parametrize("name", PAPER)
def test_every_file_is_listed_and_hash_matches(out: Path, name: str) -> None:
    op = out / name
    m = load_manifest(op)
    listed = {f.path for f in m.files}
    on_disk = {p.relative_to(op).as_posix() for p in op.rglob("*") if p.is_file() and p.name != "manifest.json"}
    assert listed == on_disk
    for f in m.files:
        assert sha256(op / f.path) == f.sha256, f.path
        assert f.committed == (f.origin == "astra")
    assert m.sglang_version == "0.5.23"
    assert not list(out.glob(".*tmp-*")), "temporary folders left behind"


def _check_includes(op: Path, recipe: CudaJitRecipe, external: list[str]) -> int:
    """Every #include of every copied file resolves inside the folder, or is a recorded external header."""
    checked = 0
    include_dirs = [op / d for d in recipe.include_dirs]
    for src in [op / s for s in recipe.sources]:
        stack, seen = [src], set()
        while stack:
            path = stack.pop()
            if path in seen:
                continue
            seen.add(path)
            for kind, name in includes_of(path.read_text()):
                cands = ([path.parent / name] if kind == '"' else []) + [d / name for d in include_dirs]
                hit = next((c for c in cands if c.is_file()), None)
                if hit is None:
                    assert name in external, f"{path.name}: #include {name} neither in the folder nor recorded"
                    assert not name.startswith(("sgl_kernel/", "flashinfer/")), name
                else:
                    assert hit.resolve().is_relative_to(op.resolve())
                    stack.append(hit)
                    checked += 1
    return checked


@pytest.mark.parametrize("name", ["silu_and_mul", "fused_add_rmsnorm"])
def test_cuda_includes_resolve_inside_folder(out: Path, name: str) -> None:
    m = load_manifest(out / name)
    assert isinstance(m.recipe, CudaJitRecipe)
    assert _check_includes(out / name, m.recipe, m.external_includes) > 3
    for b in m.baselines:
        assert b.recipe is not None and isinstance(b.recipe, CudaJitRecipe)
        _check_includes(out / name, b.recipe, m.external_includes)


def test_silu_recipe_is_sglangs_sm90_build(out: Path) -> None:
    m = load_manifest(out / "silu_and_mul")
    r = m.recipe
    assert isinstance(r, CudaJitRecipe)
    assert m.op_id == "activation.silu_and_mul"
    assert r.template_args["bfloat16"] == "bf16_t, true"
    assert r.entry == "run_activation" and r.call == ["input", "out", "'silu'"]
    assert "--use_fast_math" in r.cuda_cflags and "-DSGL_CUDA_ARCH=900" in r.cuda_cflags
    assert any(e.name == "run_activation" and e.symbol == "ActivationKernel<{targs}>::run_activation"
               for e in r.exports)
    assert r.sources == ["src/kernels/jit/csrc/elementwise/activation.cuh"] and r.arch == "sm_90a"
    sig = {t.name: t for t in m.signature.tensors}
    assert sig["input"].shape == ["T", "2*H"] and sig["out"].shape == ["T", "H"] and sig["out"].role == "output"
    anchors = {(s.dims["T"], s.dims["H"]) for s in m.shapes if "anchor" in s.tags}
    assert anchors == {(128, 11008), (1024, 14336), (8192, 14336)}
    sites = {(c.module, c.attr): c for c in m.call_sites}
    assert sites[("sglang.kernels.ops.activation.activation", "silu_and_mul")].reached_by_serving
    assert ("sglang.srt.layers.activation", "_jit_silu_and_mul") in sites
    assert sites[("sglang.srt.layers.activation", "_jit_silu_and_mul")].target == (
        "sglang.kernels.ops.activation.activation.silu_and_mul")           # one REPLACE reaches both bindings
    assert sites[("sglang.srt.layers.activation", "silu_and_mul")].binds == "caller"
    assert sites[("sglang.srt.layers.activation", "silu_and_mul")].target is None
    assert 30 <= len(m.shapes) <= 70


def test_fused_add_rmsnorm_recipe_and_baseline(out: Path) -> None:
    m = load_manifest(out / "fused_add_rmsnorm")
    r = m.recipe
    assert isinstance(r, CudaJitRecipe)
    assert r.template_args == {"bfloat16": "false, bf16_t", "float16": "false, fp16_t"}
    assert r.exports[0].symbol == "FusedAddRMSNormKernel<{targs}>::run" and "--use_fast_math" not in r.cuda_cflags
    roles = {t.name: t.role for t in m.signature.tensors}
    assert roles == {"input": "inplace", "residual": "inplace", "weight": "input"}
    paper = {(s.dims["T"], s.dims["H"]) for s in m.shapes if "paper" in s.tags}
    assert paper == {(256, 4096), (128, 11008), (1024, 4096), (512, 14336)}
    assert any("8192" in rel for rel in m.signature.relations)
    (base,) = m.baselines
    assert base.same_function and base.recipe is not None
    assert "baseline_src/include/flashinfer/norm.cuh" in {f.path for f in m.files if f.role == "baseline_kernel"}
    assert {f.path for f in m.files if f.path.startswith("glue/stubs/")} == {
        "glue/stubs/cublasLt.h", "glue/stubs/cublas_v2.h", "glue/stubs/curand_kernel.h"}
    serving = {(c.module, c.attr) for c in m.call_sites if c.reached_by_serving}
    assert ("sglang.srt.layers.layernorm", "fused_add_rmsnorm") in serving
    # the serving default is FlashInfer's kernel bound in layernorm: a patch target, not the JIT entry point
    site = {(c.module, c.attr): c for c in m.call_sites}[("sglang.srt.layers.layernorm", "fused_add_rmsnorm")]
    assert site.target == "sgl_kernel.fused_add_rmsnorm" and site.binds == base.name and site.same_function
    jit = {(c.module, c.attr): c for c in m.call_sites}[("sglang.srt.layers.layernorm", "_jit_fused_add_rmsnorm")]
    assert jit.binds == "entry_point" and jit.target == "sglang.kernels.ops.layernorm.norm.fused_add_rmsnorm"


def test_merge_state_is_triton_with_base2_flashinfer_baseline(out: Path) -> None:
    m = load_manifest(out / "merge_state")
    assert isinstance(m.recipe, TritonRecipe)
    assert m.recipe.wrapper == "merge_state_triton" and m.recipe.kernels == ["merge_state_kernel"]
    assert m.recipe.source == "src/kernels/ops/attention/merge_state.py"
    paper = {(s.dims["T"], s.dims["NH"], s.dims["D"]) for s in m.shapes if "paper" in s.tags}
    assert paper == {(512, 40, 128), (512, 32, 256), (512, 64, 128), (768, 32, 256)}
    (base,) = m.baselines
    assert base.same_function is False and "base-2" in base.note
    fi = {(c.module, c.attr): c for c in m.call_sites}[("sglang.srt.layers.attention.flashinfer_backend", "merge_state")]
    assert fi.binds == base.name and fi.same_function is False   # never a target for this op's patches
    assert "baseline_src/include/flashinfer/attention/cascade.cuh" in {f.path for f in m.files}
    lse = next(t for t in m.signature.tensors if t.name == "prefix_lse")
    assert lse.dtype == "float32" and "+inf" in lse.special_values


def test_add_trace_tags_new_shapes(out: Path, tmp_path: Path) -> None:
    from astra_sglang.cli.main import main

    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps([
        {"op": "activation.silu_and_mul", "backend": "jit", "tensor_args": ["torch.bfloat16[3, 7, 2048]"]},
        {"op": "activation.silu_and_mul", "backend": "jit", "tensor_args": ["torch.bfloat16[128, 22016]"]},
        {"op": "other.op", "backend": "jit", "tensor_args": ["torch.bfloat16[5, 6]"]},
    ]))
    assert main(["extract", "silu_and_mul", "--out", str(out), "--add-trace", str(trace)]) == 0
    m = load_manifest(out / "silu_and_mul")
    traced = [s for s in m.shapes if "traced" in s.tags]
    assert [s.dims for s in traced] == [{"T": 21, "H": 1024}]  # (128, 11008) was already there
