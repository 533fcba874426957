"""The stand-alone loader: builds extracted CUDA kernels like SGLang's load_jit, imports Triton by path, and
never imports sglang (it runs inside SGLang servers and on GPU hosts without SGLang)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from h_fixtures.ops import make_h_scale

from astra_sglang.contract.op import CudaJitRecipe, load_manifest
from astra_sglang.errors import AstraError
from astra_sglang.loader import toolchain
from astra_sglang.loader.cuda_build import (
    BuildError,
    CudaBuildSpec,
    build_batch,
    build_cuda_module,
    cuda_flags,
)
from astra_sglang.loader.launch import compile_call
from astra_sglang.loader.ptxas import parse_ptxas
from astra_sglang.loader.pyimport import load_triton_wrapper
from astra_sglang.platform_info import gencode as parse_arch

REPO = Path(__file__).resolve().parent.parent


def test_importing_the_loader_pulls_in_no_sglang_torch_or_tvm_ffi():
    code = ("import sys, astra_sglang.loader, astra_sglang.loader.cuda_build, astra_sglang.loader.launch\n"
            "bad = [m for m in ('sglang', 'torch', 'triton', 'tvm_ffi', 'agents', 'openai') if m in sys.modules]\n"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == ""


def test_no_sglang_import_anywhere_in_the_loader_source():
    for path in (REPO / "astra_sglang" / "loader").glob("*.py"):
        text = path.read_text()
        assert "import sglang" not in text and "from sglang" not in text, path


def test_resolve_call_names_literals_and_keywords():
    args = {"x": "X", "out": "OUT", "eps": 1e-6}
    call = compile_call(["x", "out", "'silu'", "eps", "flag=False"], set(args))
    pos, kw = call(args)
    assert pos == ["X", "OUT", "silu", 1e-6] and kw == {"flag": False}
    assert call.names() == {"x", "out", "eps"}            # what the harness treats as passed, not returned
    with pytest.raises(AstraError, match="neither an argument name nor a Python literal"):
        compile_call(["x", "nonexistent"], set(args))
    with pytest.raises(AstraError, match="positional item 'out' after a keyword"):
        compile_call(["x", "flag=False", "out"], set(args))


def test_sm90a_flags_match_sglang_load_jit():
    assert parse_arch("sm_90a") == ("90a", 900)
    flags = cuda_flags(["-DSGL_CUDA_ARCH=800", "-std=c++20", "-O3", "--expt-relaxed-constexpr", "--use_fast_math"],
                       "sm_90a")
    assert flags == ["-Xcompiler", "-fPIC", "-gencode=arch=compute_90a,code=sm_90a", "-DSGL_CUDA_ARCH=900",
                     "-std=c++20", "-O3", "--expt-relaxed-constexpr", "--use_fast_math", "-Xptxas=-v"]


def test_ptxas_report_is_parsed_per_entry_kernel():
    log = textwrap.dedent("""\
        ptxas info    : 0 bytes gmem
        ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_90a'
        ptxas info    : Function properties for _Z3fooPf
            8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
        ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 368 bytes cmem[0]
        ptxas info    : Function properties for _Z6helperv
            0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
        """)
    (k,) = parse_ptxas(log, demangle=False)
    assert (k.kernel, k.registers, k.smem_bytes, k.stack_frame_bytes, k.spill_stores_bytes, k.spill_loads_bytes) == (
        "_Z3fooPf", 40, 2048, 8, 4, 12)


def test_triton_wrappers_load_by_path_under_unique_names(tmp_path):
    for sub, value in (("a", 1), ("b", 2)):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "kernel.py").write_text(f"def wrapper():\n    return {value}\n")
    fa = load_triton_wrapper(tmp_path / "a" / "kernel.py", "wrapper")
    fb = load_triton_wrapper(tmp_path / "b" / "kernel.py", "wrapper")
    assert (fa(), fb()) == (1, 2)
    assert fa.__module__ != fb.__module__ and "kernel" not in sys.modules
    with pytest.raises(AstraError, match="defines no function 'nope'"):
        load_triton_wrapper(tmp_path / "a" / "kernel.py", "nope")


def test_bad_manifest_requests_fail_with_one_clear_message(tmp_path):
    op = make_h_scale(tmp_path)
    m = load_manifest(op)
    with pytest.raises(AstraError, match="no template arguments for dtype 'int8'"):
        build_cuda_module(op, m, "int8", load=False)
    (op / "src" / "h_scale.cuh").unlink()
    with pytest.raises(AstraError, match="kernel source .* is missing: run `astra-sglang extract`"):
        build_cuda_module(op, m, "bfloat16", load=False)


def test_missing_nvcc_is_reported_clearly(tmp_path, monkeypatch):
    op = make_h_scale(tmp_path)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))
    toolchain.cuda_home.cache_clear()
    try:
        with pytest.raises(AstraError, match="nvcc not found .*set CUDA_HOME"):
            build_cuda_module(op, load_manifest(op), "bfloat16", load=False)
    finally:
        toolchain.cuda_home.cache_clear()


@pytest.mark.nvcc
def test_own_kernel_builds_loads_reports_resources_and_caches(tmp_path):
    op = make_h_scale(tmp_path)
    m = load_manifest(op)
    built = build_cuda_module(op, m, "bfloat16")
    assert built.report.ok and not built.report.cached
    assert built.module is not None and hasattr(built.module, "h_scale")
    (k,) = built.report.resources
    assert "h_scale_kernel" in k.kernel and k.registers and k.spill_stores_bytes == 0
    assert built.build_dir.parent == op / "build"  # the report stays in the op folder
    assert "Used" in (built.build_dir / "ptxas_report.txt").read_text()
    assert "-Xptxas=-v" in (built.build_dir / "build.ninja").read_text()
    again = build_cuda_module(op, m, "bfloat16", load=False)
    assert again.report.cached and again.so_path == built.so_path
    # editing an included header (not part of the recipe) must rebuild
    header = op / "src" / "h_scale_math.h"
    header.write_text(header.read_text().replace("+ 1.0f", "+ 2.0f"))
    rebuilt = build_cuda_module(op, m, "bfloat16", load=False)
    assert not rebuilt.report.cached


@pytest.mark.nvcc
def test_compile_error_returns_the_compilers_message(tmp_path):
    op = make_h_scale(tmp_path)
    bad = tmp_path / "bad.cuh"
    bad.write_text((op / "src" / "h_scale.cuh").read_text().replace(
        "const int64_t n = x.numel();", "const int64_t n = x.numel() + h_undefined_symbol;"))
    with pytest.raises(BuildError) as info:
        build_cuda_module(op, load_manifest(op), "float32", kernel_source=bad, load=False)
    assert not info.value.report.ok
    assert "h_undefined_symbol" in info.value.report.log and "error" in info.value.report.log
    assert "ninja: build stopped" not in info.value.report.log


def test_build_spec_is_frozen_hashable_and_names_every_input(tmp_path):
    op = make_h_scale(tmp_path)
    m = load_manifest(op)
    a = CudaBuildSpec.from_recipe(op, m, "bfloat16")
    assert a == CudaBuildSpec.from_recipe(op, m, "bfloat16") and len({a, CudaBuildSpec.from_recipe(op, m, "bfloat16")}) == 1
    b = CudaBuildSpec.from_recipe(op, m, "float32", arch="sm_100a")
    assert a != b and (b.dtype, b.arch) == ("float32", "sm_100a") and b.template_args == m.recipe.template_args["float32"]
    cand = tmp_path / "cand.cuh"
    cand.write_text((op / "src" / "h_scale.cuh").read_text())
    c = CudaBuildSpec.from_recipe(op, m, "bfloat16", kernel_source=cand)
    assert c.kernel_source == cand.resolve() and c.sources == a.sources and c != a
    with pytest.raises(AttributeError):
        a.arch = "sm_80"  # type: ignore[misc]
    with pytest.raises(AstraError, match="candidate source .* does not exist"):
        CudaBuildSpec.from_recipe(op, m, "bfloat16", kernel_source=tmp_path / "nope.cuh")


@pytest.mark.nvcc
def test_build_batch_gives_each_spec_its_own_outcome(tmp_path):
    op = make_h_scale(tmp_path)
    m = load_manifest(op)
    bad = tmp_path / "bad.cuh"
    bad.write_text((op / "src" / "h_scale.cuh").read_text().replace(
        "const int64_t n = x.numel();", "const int64_t n = x.numel() + h_undefined_symbol;"))
    good, broken = build_batch([CudaBuildSpec.from_recipe(op, m, "bfloat16"),
                                CudaBuildSpec.from_recipe(op, m, "float32", kernel_source=bad)])
    assert not isinstance(good, Exception) and good.report.ok and good.module is None   # compile only
    assert isinstance(broken, BuildError) and "h_undefined_symbol" in broken.report.log
    again = build_cuda_module(op, m, "bfloat16", load=False)      # the same spec: the same cache entry
    assert again.report.cached and again.so_path == good.so_path


@pytest.mark.nvcc
@pytest.mark.parametrize("name", ["silu_and_mul", "fused_add_rmsnorm"])
def test_extracted_paper_kernels_compile_for_sm90a_with_resource_report(name, tmp_path, restored_op):
    op = restored_op(name)
    m = load_manifest(op)
    built = build_cuda_module(op, m, "bfloat16", load=False)
    assert built.report.ok and built.report.resources
    assert built.build_dir.is_relative_to(op / "build")
    assert (built.build_dir / "ptxas_report.txt").read_text().count("Used") >= 1


@pytest.mark.nvcc
@pytest.mark.parametrize("name", ["fused_add_rmsnorm", "merge_state"])  # the ops SGLang serves through FlashInfer
def test_extracted_flashinfer_baseline_glue_compiles(name, restored_op):
    op = restored_op(name)
    m = load_manifest(op)
    recipes = [b for b in m.baselines if isinstance(b.recipe, CudaJitRecipe)]
    assert recipes, f"{name}: the FlashInfer kernel SGLang serves with must be extracted as a baseline"
    for b in recipes:
        dtype = next(iter(b.recipe.template_args))
        built = build_cuda_module(op, m, dtype, recipe=b.recipe, load=False)
        assert built.report.ok and built.report.resources, b.name
