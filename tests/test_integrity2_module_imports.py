"""A built CUDA module's imports are checked against an allowlist before any process loads it (issue 22: text the
source screen cannot see, e.g. an asm label split over string literals, reached ``PyRun_SimpleString``).

The candidates here break the screen's rules openly (``extern "C"``, ``system``); the check is exercised on its
own by calling the harness's build step (``evaluate._build_cuda``) and ``patches add``'s, which run after the
screen. The originals' modules and the shipped fused_add_rmsnorm patch must pass (no false reject).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from h_fixtures.ops import make_h_scale

from astra_sglang.contract.eval_config import EvalConfig
from astra_sglang.contract.op import load_manifest
from astra_sglang.errors import AstraError
from astra_sglang.harness.parent import module_imports
from astra_sglang.harness.parent.evaluate import _build_cuda
from astra_sglang.harness.parent.module_imports import allowed, imports_refusal

REPO = Path(__file__).resolve().parent.parent
FUSED_PATCH = REPO / "patches" / "fused_add_rmsnorm" / "fused-add-rmsnorm-mr-k4" / "kernel.cuh"

# What the modules of the original SGLang kernels and the shipped patch import when built here (nm -D), a sample
ORIGINALS_IMPORT = [
    "cudaLaunchKernelExC", "__cudaRegisterFatBinary", "__cudaRegisterFunction", "__cudaRegisterVar",
    "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", "cudaFuncSetAttribute", "TVMFFIEnvGetStream",
    "TVMFFIErrorSetRaised", "TVMFFIDataTypeToString", "memcpy", "memset", "memchr", "strlen", "malloc", "free",
    "__cxa_guard_acquire", "__cxa_throw", "__cxa_atexit", "_Unwind_Resume", "__gxx_personality_v0", "_Znwm",
    "_ZdlPvm", "_ITM_registerTMCloneTable", "__gmon_start__", "_ZSt4cerr", "_ZNSolsEi", "_ZNSo5writeEPKcl",
    "_ZNSt8ios_base4InitC1Ev", "_ZTVN10__cxxabiv120__si_class_type_infoE", "_ZTISt13runtime_error",
    "_ZNKSt13runtime_error4whatEv", "_ZSt24__throw_out_of_range_fmtPKcz",
    "_ZNSt7__cxx1119basic_ostringstreamIcSt11char_traitsIcESaIcEEC1Ev",
    "_ZNKRSt7__cxx1115basic_stringbufIcSt11char_traitsIcESaIcEE3strEv",
    "_ZTTNSt7__cxx1119basic_ostringstreamIcSt11char_traitsIcESaIcEEE",
    "_ZStlsISt11char_traitsIcEERSt13basic_ostreamIcT_ES5_PKc", "_ZNKSt5ctypeIcE13_M_widen_initEv",
]
REFUSED = [
    "PyRun_SimpleString", "PyGILState_Ensure", "_Py_Dealloc", "dlopen", "dlsym", "system", "popen", "execve",
    "fork", "clone", "ptrace", "prctl", "mprotect", "mmap", "signal", "sigaction", "kill", "open", "fopen", "read",
    "write", "socket", "connect", "pthread_create", "getenv", "TVMFFIFunctionGetGlobal", "__read_chk",
    "_ZNSt6thread15_M_start_threadESt10unique_ptrINS_6_StateESt14default_deleteIS1_EEPFvvE",
    "_ZNSt13basic_filebufIcSt11char_traitsIcEE4openEPKcSt13_Ios_Openmode", "_ZNSt10filesystem4pathC1Ev",
    "_ZN8pybind116handle8inc_refEv", "_ZN3tvm3ffi6Module12LoadFromFileERKNS0_6StringE",
    "_ZN3tvm3ffi9ModuleObj11GetFunctionERKNS0_6StringEb",
]


@pytest.mark.parametrize("symbol", ORIGINALS_IMPORT)
def test_what_the_original_kernels_import_is_allowed(symbol):
    assert allowed(symbol)


@pytest.mark.parametrize("symbol", REFUSED)
def test_python_processes_files_sockets_and_lookups_are_refused(symbol):
    assert not allowed(symbol)


def test_a_module_whose_imports_cannot_be_listed_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(module_imports.shutil, "which", lambda _: None)
    line = imports_refusal(tmp_path / "m.so")
    assert line == "refused: cannot list the built module's imports (nm (binutils) not found on PATH)"


H_SCALE_RUN = "static void run(tvm::ffi::TensorView x, tvm::ffi::TensorView out, double alpha) {"
PY_DECL = 'extern "C" int PyRun_SimpleString(const char*);\n'


def _variant(src: Path, dst: Path, marker: Path, how: str) -> Path:
    """h_scale's kernel with a call that runs code in the loading process: from a static constructor, or
    from the host wrapper."""
    text = src.read_text()
    py = f'PyRun_SimpleString("open(\\"{marker}\\", \\"w\\").write(\\"loaded\\")");'
    if how == "ctor":
        text = PY_DECL + text + "namespace { struct Ctor { Ctor() { " + py + " } } ctor; }\n"
    elif how == "wrapper":
        text = PY_DECL + text.replace(H_SCALE_RUN, H_SCALE_RUN + "\n    " + py)
    else:
        text = "#include <cstdlib>\n" + text.replace(H_SCALE_RUN, H_SCALE_RUN + f'\n    std::system("touch {marker}");')
    dst.write_text(text)
    return dst


@pytest.fixture(scope="module")
def h_scale(tmp_path_factory) -> Path:
    """One h_scale folder for the module: its builds go to the loader's default cache (``<op>/build``), keyed by
    the sources' digest and the toolchain, so a module one test built (the original, a variant) is not rebuilt by
    the next; only the toolchain test's builds differ (another host compiler is another key)."""
    return make_h_scale(tmp_path_factory.mktemp("ops"))


@pytest.fixture(scope="module")
def variants(h_scale, tmp_path_factory) -> dict[str, Path]:
    """The refused variants of h_scale, written once per module (same path, same bytes: the build cache's key),
    plus ``marker``, the file any of them creates if it ever runs. ``wrapper`` is ``k.cuh``, the name
    ``patches add`` reports."""
    d = tmp_path_factory.mktemp("variants")
    marker = d / "ran"
    src = h_scale / "src" / "h_scale.cuh"
    files = {how: _variant(src, d / name, marker, how)
             for how, name in (("ctor", "ctor.cuh"), ("wrapper", "k.cuh"), ("system", "system.cuh"))}
    return {**files, "marker": marker}


@pytest.fixture
def never_loaded(monkeypatch):
    """Any load of a built module in this process fails the test."""
    from astra_sglang.loader import cuda_build

    def load(so_path: Path):
        raise AssertionError(f"{so_path} was loaded")

    monkeypatch.setattr(cuda_build, "_load", load)


@pytest.mark.nvcc
def test_candidates_calling_python_or_system_are_refused_without_being_loaded(h_scale, variants, never_loaded):
    manifest = load_manifest(h_scale)
    marker = variants["marker"]
    cands = [variants[how] for how in ("ctor", "wrapper", "system")]
    config = EvalConfig(device="cpu")
    orig, ctor, wrapper, system = _build_cuda(h_scale, manifest, [None, *cands], ["float32"], config)
    assert orig.ok, orig.log
    assert not ctor.ok and ctor.log.startswith("refused: the built module imports PyRun_SimpleString ("), ctor.log
    assert not wrapper.ok and wrapper.log.startswith("refused: the built module imports PyRun_SimpleString (")
    assert not system.ok and system.log.startswith("refused: the built module imports system (")
    assert len(ctor.log.splitlines()) == 1
    assert not marker.exists()  # nothing ran: the modules were built, never loaded


@pytest.mark.nvcc
def test_patches_add_refuses_a_module_importing_python(h_scale, variants, never_loaded):
    from astra_sglang.patches.tooling.add import _build_cuda as add_build

    cand = variants["wrapper"]  # k.cuh
    with pytest.raises(AstraError) as e:
        add_build(h_scale, load_manifest(h_scale), cand, ["float32"])
    assert str(e.value).startswith("k.cuh (float32): refused: the built module imports PyRun_SimpleString ("), e.value


@pytest.mark.nvcc
def test_the_shipped_fused_patch_and_its_original_pass(restored_op, tmp_path, never_loaded):
    """No false reject: SGLang's fused_add_rmsnorm module and the shipped patch's import only allowed symbols."""
    op = restored_op("fused_add_rmsnorm")
    config = EvalConfig(device="cpu")
    orig, patch = _build_cuda(op, load_manifest(op), [None, FUSED_PATCH], ["bfloat16"], config)
    assert orig.ok and patch.ok, patch.log
    from astra_sglang.loader.cuda_build import CudaBuildSpec

    spec = CudaBuildSpec.from_recipe(op, load_manifest(op), "bfloat16")
    assert imports_refusal(spec.build(load=False).so_path) is None


@pytest.fixture
def static_libstdcxx_toolchain(tmp_path, monkeypatch):
    """A host compiler that links libstdc++ into every module, as the H200 image's toolchain did (2026-12-03):
    SGLang's own silu_and_mul then imported fopen64, read, write, syscall, arc4random, iconv and locales, and the
    fixed allowlist refused the original itself."""
    import shutil as sh

    gxx = sh.which("g++")
    if gxx is None:
        pytest.skip("needs g++")
    cxx = tmp_path / "cxx-static-libstdc++"
    cxx.write_text(f'#!/bin/sh\nexec {gxx} "$@" -static-libstdc++\n')
    cxx.chmod(0o755)
    monkeypatch.setenv("CXX", str(cxx))
    return cxx


@pytest.mark.nvcc
def test_a_toolchain_that_links_libstdcxx_in_rejects_no_honest_candidate(h_scale, tmp_path, never_loaded,
                                                                          static_libstdcxx_toolchain):
    """No false reject on another toolchain: what SGLang's own kernel imports when built here is tolerated, so an
    honest candidate passes; calls into Python or the shell stay refused whatever the original imports."""
    manifest = load_manifest(h_scale)
    src = h_scale / "src" / "h_scale.cuh"
    honest = tmp_path / "honest.cuh"
    honest.write_text("// the original, re-submitted as a candidate\n" + src.read_text())
    marker = tmp_path / "ran"
    py, system = (_variant(src, tmp_path / f"{how}.cuh", marker, how) for how in ("wrapper", "system"))
    config = EvalConfig(device="cpu")  # the default cache: `patches add` below finds these builds there
    orig, ok, bad_py, bad_system = _build_cuda(h_scale, manifest, [None, honest, py, system], ["float32"], config)
    assert orig.ok and ok.ok, ok.log
    assert bad_py.log.startswith("refused: the built module imports PyRun_SimpleString"), bad_py.log
    assert bad_system.log.startswith("refused: the built module imports system"), bad_system.log
    from astra_sglang.loader.cuda_build import CudaBuildSpec
    from astra_sglang.patches.tooling.add import _build_cuda as add_build

    spec = CudaBuildSpec.from_recipe(h_scale, manifest, "float32", kernel_source=honest)
    assert module_imports.imports_refusal(spec.build(load=False).so_path) is not None  # the fixed list alone refuses
    assert add_build(h_scale, manifest, honest, ["float32"]).startswith("screen passed; built for float32")


@pytest.mark.parametrize("symbol", ["PyRun_SimpleString", "dlopen", "dlsym", "system", "execve", "fork", "clone",
                                    "posix_spawn", "ptrace", "mprotect", "socket", "pthread_create",
                                    "TVMFFIFunctionGetGlobal", "_ZN3tvm3ffi6Module12LoadFromFileERKNS0_6StringE"])
def test_what_no_toolchain_excuses_stays_refused_even_when_the_original_imports_it(symbol):
    assert module_imports.refused_symbols([symbol, "fopen64"], tolerated=[symbol, "fopen64"]) == [symbol]


def test_the_refusal_names_the_first_symbol_and_counts_the_rest(tmp_path, monkeypatch):
    monkeypatch.setattr(module_imports, "undefined_symbols", lambda _: ["memcpy", "fopen", "read", "write", "open",
                                                                       "socket"])
    line = module_imports.imports_refusal(tmp_path / "m.so")
    assert line is not None and line.startswith("refused: the built module imports fopen and 4 more (read, write, "
                                                 "open, ...) ("), line
    assert module_imports.imports_refusal(tmp_path / "m.so", ["fopen", "read", "write", "open"]).startswith(
        "refused: the built module imports socket (")
