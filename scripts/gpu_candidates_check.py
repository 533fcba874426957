#!/usr/bin/env python3
"""Stand-alone H200 check of the hand-written candidates against SGLang's original kernels.

Builds SGLang 0.5.23's original JIT kernels (activation.cuh, fused_add_rmsnorm.cuh), our hand-written
candidates (tests/candidates/<op>/hand_written.*) and a few compile-time variants of them, FlashInfer's
FusedAddRMSNorm (the serving baseline, through a small wrapper of ours), checks every candidate against the
original and a float32 reference, and times them side by side: CUDA-graph replay over rotating buffer sets
(more than 4x the 60 MB L2 where memory allows: "cold"), interleaved, medians, % of a measured copy ceiling.

Needs: torch with CUDA, triton, nvcc (CUDA_HOME), a host C++ compiler ($CXX or g++), apache-tvm-ffi 0.1.11.
No sglang import: the original sources are taken from extracted/<op>/src (or baseline_src), else --sglang-root
/--flashinfer-include, else an installed sglang/flashinfer package located without importing it.

    python scripts/gpu_candidates_check.py                 # build, check, time (writes $OUT/... if OUT set)
    python scripts/gpu_candidates_check.py --compile-only  # CPU machine: build everything, print ptxas report
    python scripts/gpu_candidates_check.py --sweep         # also sweep the merge_state tile sizes

Why it builds directly instead of through astra_sglang.loader: several exports (dtypes, cast flag) go into
one module here, so 17 modules build in parallel in about half a minute on the H200's 16 cores.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

REPO = Path(__file__).resolve().parents[1]
CAND = REPO / "tests" / "candidates"
L2_BYTES = 60 * 2**20
COLD_BYTES = 4 * L2_BYTES
MAX_SETS = 512

# --------------------------------------------------------------------------------------------- sources


def _find_file(roots: list[Path], name: str) -> Optional[Path]:
    """First match under the first root that has one; SGLang's own layout (elementwise/, attention/) preferred."""
    for root in roots:
        if root.is_dir():
            hits = sorted(root.rglob(name), key=lambda p: ("elementwise" not in p.parts and "attention" not in p.parts, str(p)))
            if hits:
                return hits[0]
    return None


def _site_dir(pkg: str) -> Optional[Path]:
    """Where an installed package lives, without importing it (sglang imports half the world)."""
    try:
        spec = importlib.util.find_spec(pkg)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


@dataclass
class Sources:
    jit_include: Optional[Path] = None  # folder holding sgl_kernel/
    activation: Optional[Path] = None
    fused_add_rmsnorm: Optional[Path] = None
    merge_state: Optional[Path] = None
    flashinfer_include: Optional[Path] = None  # folder holding flashinfer/norm.cuh
    notes: list[str] = field(default_factory=list)


def find_sources(args: argparse.Namespace) -> Sources:
    src = Sources()
    ext = REPO / "extracted"
    roots: list[Path] = []
    if args.sglang_root:
        roots.append(Path(args.sglang_root))
    roots += [ext / "silu_and_mul" / "src", ext / "fused_add_rmsnorm" / "src", ext / "merge_state" / "src"]
    site = _site_dir("sglang")
    if site is not None:
        roots.append(site / "kernels")
    for root in roots:
        if not root.is_dir():
            continue
        for p in root.rglob("utils.cuh"):
            if p.parent.name == "sgl_kernel":
                src.jit_include = p.parent.parent
                break
        if src.jit_include:
            break
    src.activation = _find_file(roots, "activation.cuh")
    src.fused_add_rmsnorm = _find_file(roots, "fused_add_rmsnorm.cuh")
    src.merge_state = _find_file(roots, "merge_state.py")
    fi_roots: list[Path] = []
    if args.flashinfer_include:
        fi_roots.append(Path(args.flashinfer_include))
    fi_roots += [ext / "fused_add_rmsnorm" / "baseline_src", ext / "merge_state" / "baseline_src"]
    fsite = _site_dir("flashinfer")
    if fsite is not None:
        fi_roots.append(fsite / "data" / "include")
    norm = None
    for root in fi_roots:
        if root.is_dir():
            for p in root.rglob("norm.cuh"):
                if p.parent.name == "flashinfer":
                    norm = p
                    break
        if norm:
            break
    if norm is not None:
        src.flashinfer_include = norm.parent.parent
    for k in ("jit_include", "activation", "fused_add_rmsnorm", "merge_state", "flashinfer_include"):
        src.notes.append(f"{k}: {getattr(src, k)}")
    return src


# --------------------------------------------------------------------------------------------- building

WRAP_HEAD = """#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
"""

# Our own glue: a 16-byte-per-thread copy (the ceiling) and FlashInfer's FusedAddRMSNorm behind tvm-ffi.
UTIL_CUH = r"""
#include <cuda_runtime.h>
#include <cstdint>
namespace astra_util {
__global__ void copy16_kernel(const uint4* __restrict__ s, uint4* __restrict__ d, uint64_t n) {
  const uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) d[i] = s[i];
}
inline void copy16(tvm::ffi::TensorView src, tvm::ffi::TensorView dst) {
  const uint64_t bytes = static_cast<uint64_t>(src.numel()) * ((src.dtype().bits + 7) / 8);
  const uint64_t n = bytes / 16;
  auto dev = src.device();
  auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(dev.device_type, dev.device_id));
  copy16_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(
      static_cast<const uint4*>(src.data_ptr()), static_cast<uint4*>(dst.data_ptr()), n);
}
}  // namespace astra_util
"""

FI_CUH = r"""
#include <flashinfer/norm.cuh>
namespace astra_fi {
template <typename T>
void fused_add_rmsnorm(tvm::ffi::TensorView x, tvm::ffi::TensorView r, tvm::ffi::TensorView w, double eps,
                       bool pdl) {
  auto dev = x.device();
  auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(dev.device_type, dev.device_id));
  cudaError_t err = flashinfer::norm::FusedAddRMSNorm<T>(
      static_cast<T*>(x.data_ptr()), static_cast<T*>(r.data_ptr()), static_cast<T*>(w.data_ptr()),
      static_cast<uint32_t>(x.size(0)), static_cast<uint32_t>(x.size(1)), static_cast<uint32_t>(x.stride(0)),
      static_cast<uint32_t>(r.stride(0)), static_cast<float>(eps), pdl, stream);
  TVM_FFI_ICHECK(err == cudaSuccess) << cudaGetErrorString(err);
}
}  // namespace astra_fi
"""


@dataclass
class ModuleSpec:
    name: str
    source: Optional[Path]  # kernel .cuh, #included by absolute path
    exports: list[tuple[str, str]]  # (export name, C++ symbol)
    flags: list[str] = field(default_factory=list)
    include_dirs: list[Path] = field(default_factory=list)
    inline: str = ""  # extra source text placed after the kernel include
    expect_fail: bool = False


@dataclass
class Built:
    spec: ModuleSpec
    ok: bool
    so: Optional[Path]
    seconds: float
    log: str
    resources: list[str]


def _tvm_dirs() -> tuple[Path, Path]:
    import tvm_ffi.libinfo as li

    inc = Path(li.find_include_path())
    lib = Path(li.find_libtvm_ffi()).parent
    return inc, lib


def _ptxas_summary(log: str) -> list[str]:
    """One line per kernel: demangled-ish name, registers, spills (the agents' resource report)."""
    out, name = [], None
    spill = ""
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            name = m.group(1)
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            spill = f"spill {m.group(1)}/{m.group(2)} B"
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and name:
            short = re.sub(r"^_Z\w*?(far_\w+|gated_act_kernel|unary_act_kernel|copy16_kernel|\w*Kernel\w*)", r"\1", name)
            out.append(f"{short[:90]}: {m.group(1)} regs, {spill}")
            name = None
    return out


def build_module(spec: ModuleSpec, build_root: Path, jit_include: Path, cxx: str) -> Built:
    t0 = time.time()
    tvm_inc, tvm_lib = _tvm_dirs()
    text = WRAP_HEAD
    if spec.source is not None:
        text += f'#include "{spec.source.resolve()}"\n'
    text += spec.inline
    text += "namespace sglang {\n"
    for name, sym in spec.exports:
        text += f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({name}, ({sym}));\n"
    text += "}  // namespace sglang\n"
    flags = [
        "-Xcompiler",
        "-fPIC",
        "-gencode=arch=compute_90a,code=sm_90a",
        "-DSGL_CUDA_ARCH=900",
        "-std=c++20",
        "-O3",
        "--expt-relaxed-constexpr",
        "-Xptxas=-v",
        *spec.flags,
    ]
    incs = [f"-I{tvm_inc}", f"-I{jit_include}", *[f"-I{d}" for d in spec.include_dirs]]
    h = hashlib.sha256()
    h.update(text.encode())
    h.update(" ".join(flags + incs).encode())
    if spec.source is not None:
        h.update(spec.source.read_bytes())
    d = build_root / f"{spec.name}-{h.hexdigest()[:16]}"
    so = d / f"{spec.name}.so"
    if so.exists() and (d / "ptxas.log").exists():
        log = (d / "ptxas.log").read_text()
        return Built(spec, True, so, 0.0, log, _ptxas_summary(log))
    d.mkdir(parents=True, exist_ok=True)
    (d / "cuda.cu").write_text(text)
    nvcc = str(Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc")
    if not Path(nvcc).exists():
        nvcc = shutil.which("nvcc") or "nvcc"
    cmd = [nvcc, *flags, *incs, "-c", str(d / "cuda.cu"), "-o", str(d / "cuda_0.o")]
    p = subprocess.run(cmd, capture_output=True, text=True)
    log = p.stdout + p.stderr
    if p.returncode != 0:
        return Built(spec, False, None, time.time() - t0, log, [])
    cuda_lib = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "lib64"
    link = [cxx, str(d / "cuda_0.o"), "-shared", f"-L{tvm_lib}", "-ltvm_ffi", f"-L{cuda_lib}", "-lcudart", "-o", str(so)]
    q = subprocess.run(link, capture_output=True, text=True)
    if q.returncode != 0:
        return Built(spec, False, None, time.time() - t0, log + q.stdout + q.stderr, [])
    (d / "ptxas.log").write_text(log)
    return Built(spec, True, so, time.time() - t0, log, _ptxas_summary(log))


def _act_exports(targs: str, suffix: str, only_run: bool = False) -> list[tuple[str, str]]:
    names = [
        "run_activation",
        "run_activation_with_rounding",
        "run_activation_with_rounding_input_inplace",
        "run_activation_filtered",
        "run_activation_sorted_filtered",
        "run_unary_activation",
    ]
    if only_run:
        names = names[:1]
    return [(f"{n}_{suffix}", f"ActivationKernel<{targs}>::{n}") for n in names]


def _far_exports(pairs: list[tuple[bool, str]]) -> list[tuple[str, str]]:
    return [
        (f"far_{'castx' if c else 'plain'}_{d}", f"FusedAddRMSNormKernel<{'true' if c else 'false'}, {d}_t>::run")
        for c, d in pairs
    ]


def module_specs(src: Sources, stub_dir: Path, with_broken: bool) -> list[ModuleSpec]:
    specs = [ModuleSpec("util", None, [("copy16", "astra_util::copy16")], inline=UTIL_CUH)]
    all_far = [(False, "bf16"), (True, "bf16"), (False, "fp16"), (True, "fp16")]
    hw_far = CAND / "fused_add_rmsnorm" / "hand_written.cuh"
    hw_act = CAND / "silu_and_mul" / "hand_written.cuh"
    if src.fused_add_rmsnorm:
        # Each extracted folder holds only its own include closure: search the kernel's own folder too.
        own_include = src.fused_add_rmsnorm.parents[2] / "include"
        specs.append(ModuleSpec("far_orig", src.fused_add_rmsnorm, _far_exports(all_far),
                                include_dirs=[own_include] if own_include.is_dir() else []))
    specs += [
        ModuleSpec("far_cand", hw_far, _far_exports(all_far)),
        ModuleSpec("far_cand_nopdl", hw_far, _far_exports([(False, "bf16")]), ["-DASTRA_FAR_PDL=0"]),
        ModuleSpec("far_cand_t256", hw_far, _far_exports([(False, "bf16")]), ["-DASTRA_FAR_MAX_THREADS=256"]),
        ModuleSpec("far_cand_t1024", hw_far, _far_exports([(False, "bf16")]), ["-DASTRA_FAR_MAX_THREADS=1024"]),
    ]
    if src.flashinfer_include:
        specs.append(
            ModuleSpec(
                "far_flashinfer",
                None,
                [("fi_far_bf16", "astra_fi::fused_add_rmsnorm<__nv_bfloat16>"),
                 ("fi_far_fp16", "astra_fi::fused_add_rmsnorm<__half>")],
                include_dirs=[src.flashinfer_include, stub_dir],
                inline=FI_CUH,
            )
        )
    dts = [("bf16", "bf16_t, true"), ("fp16", "fp16_t, true"), ("fp32", "float, true")]
    for suffix, targs in dts:
        if src.activation:
            specs.append(ModuleSpec(f"act_orig_{suffix}", src.activation, _act_exports(targs, suffix), ["--use_fast_math"]))
        specs.append(ModuleSpec(f"act_cand_{suffix}", hw_act, _act_exports(targs, suffix), ["--use_fast_math"]))
    for name, defs in [
        ("act_cand_vpt1", ["-DASTRA_ACT_VPT_SMALL=1"]),
        ("act_cand_vpt4", ["-DASTRA_ACT_VPT_SMALL=4"]),
        ("act_cand_early", ["-DASTRA_ACT_EARLY_TRIGGER=1"]),
    ]:
        specs.append(ModuleSpec(name, hw_act, _act_exports("bf16_t, true", "bf16", True), ["--use_fast_math", *defs]))
    if with_broken:
        for p in sorted((CAND / "fused_add_rmsnorm").glob("*/*.cuh")):
            specs.append(ModuleSpec(f"far_{p.parent.name}_{p.stem}", p, _far_exports([(False, "bf16")]),
                                    expect_fail=p.stem in ("compile_error", "r1")))
        for p in sorted((CAND / "silu_and_mul").glob("*/*.cuh")):
            specs.append(ModuleSpec(f"act_{p.parent.name}_{p.stem}", p, _act_exports("bf16_t, true", "bf16"),
                                    ["--use_fast_math"], expect_fail=p.stem in ("compile_error", "r1")))
    return specs


def build_all(specs: list[ModuleSpec], src: Sources, build_root: Path, jobs: int) -> dict[str, Built]:
    cxx = os.environ.get("CXX") or shutil.which("g++") or "c++"
    out: dict[str, Built] = {}
    with cf.ThreadPoolExecutor(max_workers=jobs) as ex:
        futs = {ex.submit(build_module, s, build_root, src.jit_include, cxx): s.name for s in specs}
        for f in cf.as_completed(futs):
            b = f.result()
            out[b.spec.name] = b
            status = "ok" if b.ok else "FAILED"
            if b.spec.expect_fail:
                status = "failed as expected" if not b.ok else "BUILT BUT SHOULD FAIL"
            print(f"  build {b.spec.name:34s} {status:22s} {b.seconds:5.1f}s", flush=True)
            if not b.ok and not b.spec.expect_fail:
                print("\n".join(b.log.splitlines()[-25:]))
            if b.spec.expect_fail and not b.ok:
                first = next((ln for ln in b.log.splitlines() if "error" in ln), "")
                print(f"      compiler: {first[:160]}")
    return out


# --------------------------------------------------------------------------------------------- timing


class Timer:
    """CUDA-graph replay of one call per buffer set (sets rotate so the L2 holds none of them), interleaved."""

    def __init__(self, torch_mod: Any, rounds: int) -> None:
        self.torch = torch_mod
        self.rounds = rounds

    def capture(self, fn: Callable[[int], Any], nsets: int) -> Any:
        torch = self.torch
        for i in range(min(nsets, 2)):
            fn(i)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(nsets):
                fn(i)
        torch.cuda.synchronize()
        return g

    def run(self, impls: dict[str, Callable[[int], Any]], nsets: int) -> dict[str, dict[str, float]]:
        torch = self.torch
        graphs = {}
        for name, fn in impls.items():
            try:
                graphs[name] = self.capture(fn, nsets)
            except Exception as e:  # an impl that cannot run here is reported, not fatal
                print(f"    ! {name}: {type(e).__name__}: {str(e).splitlines()[0][:150]}")
        samples: dict[str, list[float]] = {n: [] for n in graphs}
        names = list(graphs)
        ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for r in range(self.rounds):
            order = names if r % 2 == 0 else names[::-1]
            for n in order:
                g = graphs[n]
                g.replay()
                ev0.record()
                g.replay()
                g.replay()
                ev1.record()
                ev1.synchronize()
                samples[n].append(ev0.elapsed_time(ev1) * 1e3 / (2 * nsets))
        res = {}
        for n, s in samples.items():
            med = statistics.median(s)
            res[n] = {"us": med, "spread_pct": 100.0 * (max(s) - min(s)) / med if med > 0 else 0.0}
        del graphs
        return res


def nsets_for(bytes_per_set: int) -> int:
    return max(2, min(MAX_SETS, math.ceil(COLD_BYTES / max(bytes_per_set, 1))))


# --------------------------------------------------------------------------------------------- ops


def load_py(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def _err(a: Any, b: Any) -> float:
    d = (a.double() - b.double()).abs()
    d = d[~(a.isnan() & b.isnan())] if d.numel() else d
    return float(d.max()) if d.numel() else 0.0


def _close(torch: Any, got: Any, ref: Any, dtype: Any) -> bool:
    tol = {torch.bfloat16: 2e-2, torch.float16: 2e-3, torch.float32: 1e-4}[dtype]
    if (got.isnan() != ref.isnan()).any():
        return False
    m = ~ref.isnan()
    return bool(torch.allclose(got[m].double(), ref[m].double(), atol=tol, rtol=tol))


@dataclass
class Row:
    op: str
    shape: str
    dtype: str
    mb: float
    cold: bool
    times: dict[str, dict[str, float]]
    checks: dict[str, str]
    base: str

    def line(self, ceiling: float, impl_order: list[str]) -> str:
        base = self.times.get(self.base, {}).get("us")
        parts = []
        for n in impl_order:
            if n not in self.times:
                continue
            us = self.times[n]["us"]
            pct = 100.0 * self.mb * 1e6 / (us * 1e-6) / ceiling / 1e9 if ceiling else 0.0
            sp = f" {base / us:4.2f}x" if base and n != self.base else ""
            parts.append(f"{n}={us:7.2f}us {pct:3.0f}%{sp}")
        tag = "" if self.cold else " (L2-resident)"
        return f"{self.op:18s} {self.shape:16s} {self.dtype:5s} {self.mb:7.1f}MB{tag} | " + " | ".join(parts)


class Checker:
    def __init__(self) -> None:
        self.failures: list[str] = []

    def record(self, ok: bool, what: str) -> str:
        if not ok:
            self.failures.append(what)
            print(f"    CHECK FAILED: {what}")
        return "ok" if ok else "FAIL"


def run_merge_state(torch: Any, src: Sources, timer: Timer, chk: Checker, sweep: bool) -> list[Row]:
    cand = load_py(CAND / "merge_state" / "hand_written.py", "astra_ms_cand")
    orig = load_py(src.merge_state, "astra_ms_orig") if src.merge_state else None
    dev = "cuda"

    def make(T: int, H: int, D: int, dt: Any, special: bool, seed: int = 0) -> list[Any]:
        g = torch.Generator(device=dev).manual_seed(seed)
        po = torch.randn(T, H, D, device=dev, generator=g).to(dt)
        so = torch.randn(T, H, D, device=dev, generator=g).to(dt)
        pl = torch.randn(T, H, device=dev, generator=g) * 4
        sl = torch.randn(T, H, device=dev, generator=g) * 4
        if special and T * H >= 4:
            pl.view(-1)[0] = float("inf")
            sl.view(-1)[1] = float("-inf")
            pl.view(-1)[2] = float("-inf")
            pl.view(-1)[3] = 80.0
        return [po, pl, so, sl]

    def ref(po: Any, pl: Any, so: Any, sl: Any) -> tuple[Any, Any]:
        pl = torch.where(pl == float("inf"), float("-inf"), pl.double())
        sl = torch.where(sl == float("inf"), float("-inf"), sl.double())
        m = torch.maximum(pl, sl)
        a, b = torch.exp(pl - m), torch.exp(sl - m)
        se = a + b
        return po.double() * (a / se)[..., None] + so.double() * (b / se)[..., None], torch.log(se) + m

    rows = []
    timed = [
        (512, 40, 128, "bf16"), (512, 32, 256, "bf16"), (512, 64, 128, "bf16"), (768, 32, 256, "bf16"),
        (512, 40, 128, "fp16"), (512, 32, 256, "fp16"), (512, 64, 128, "fp16"), (768, 32, 256, "fp16"),
        (512, 40, 128, "fp32"), (512, 32, 256, "fp32"), (512, 64, 128, "fp32"), (768, 32, 256, "fp32"),
        (1, 32, 128, "bf16"), (32, 32, 128, "bf16"), (8192, 32, 128, "bf16"),
    ]
    check_only = [(37, 5, 96, "bf16"), (3, 7, 64, "fp32"), (2, 3, 80, "fp16")]
    dmap = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    for T, H, D, dn in timed + check_only:
        dt = dmap[dn]
        shape = f"{T}x{H}x{D}"
        checks = {}
        args = make(T, H, D, dt, special=True)
        r_o, r_l = ref(*args)
        for name, mod in (("orig", orig), ("cand", cand)):
            if mod is None:
                continue
            out = torch.full_like(args[0], float("nan"))
            out_l = torch.full_like(args[1], float("nan"))
            mod.merge_state_triton(*args, output=out, output_lse=out_l)
            torch.cuda.synchronize()
            ok = _close(torch, out, r_o.to(dt), dt) and _close(torch, out_l, r_l.float(), torch.float32)
            checks[name] = chk.record(ok, f"merge_state {name} {shape} {dn} vs float64 reference "
                                          f"(max err {_err(out, r_o):.2e})")
            if name == "cand" and orig is not None:
                o2 = torch.full_like(args[0], float("nan"))
                l2 = torch.full_like(args[1], float("nan"))
                orig.merge_state_triton(*args, output=o2, output_lse=l2)
                same = bool(torch.equal(o2.nan_to_num(0.0), out.nan_to_num(0.0))) and bool(
                    torch.equal(l2.nan_to_num(0.0), out_l.nan_to_num(0.0)))
                checks["cand==orig bitwise"] = "yes" if same else f"no (max {_err(out, o2):.1e})"
        if (T, H, D, dn) in check_only:
            continue
        per_set = 3 * T * H * D * args[0].element_size() + 4 * T * H * 4
        mb = (3 * T * H * D * args[0].element_size() + 3 * T * H * 4) / 1e6
        n = nsets_for(per_set)
        sets = [make(T, H, D, dt, special=False, seed=i + 1) for i in range(n)]
        outs = [(torch.empty_like(s[0]), torch.empty_like(s[1])) for s in sets]
        impls: dict[str, Callable[[int], Any]] = {}
        if orig is not None:
            impls["orig"] = lambda i: orig.merge_state_triton(*sets[i], output=outs[i][0], output_lse=outs[i][1])
        impls["cand"] = lambda i: cand.merge_state_triton(*sets[i], output=outs[i][0], output_lse=outs[i][1])
        if sweep and dn == "bf16":
            for rws in (4, 8, 16, 32, 64):
                for nw in (2, 4, 8):
                    if rws * triton_next_pow2(D) > 16384:
                        continue
                    impls[f"r{rws}w{nw}"] = (lambda i, rws=rws, nw=nw: cand._launch(
                        *sets[i], outs[i][0], outs[i][1], rows=rws, num_warps=nw))
        times = timer.run(impls, n)
        row = Row("merge_state", shape, dn, mb, n * per_set >= COLD_BYTES, times, checks, "orig")
        rows.append(row)
        print("  " + row.line(CEILING[0], list(impls)), flush=True)
        del sets, outs
    return rows


def triton_next_pow2(x: int) -> int:
    return 1 << (x - 1).bit_length()


def run_far(torch: Any, mods: dict[str, Any], timer: Timer, chk: Checker) -> list[Row]:
    dev = "cuda"
    eps = 1e-6
    dmap = {"bf16": torch.bfloat16, "fp16": torch.float16}

    def ref(x: Any, r: Any, w: Any, castx: bool) -> tuple[Any, Any]:
        s = x.float() + r.float()
        r_new = s.to(x.dtype)
        rs = torch.rsqrt((s * s).mean(-1, keepdim=True) + eps)
        if castx:
            out = ((s * rs).to(x.dtype).float() * w.float()).to(x.dtype)
        else:
            out = (r_new.float() * w.float() * rs).to(x.dtype)
        return out, r_new

    def fn(mod_name: str, export: str) -> Optional[Callable]:
        m = mods.get(mod_name)
        return getattr(m, export, None) if m is not None else None

    timed = [
        (1, 4096, "bf16"), (16, 4096, "bf16"), (64, 8192, "bf16"), (256, 4096, "bf16"), (1024, 4096, "bf16"),
        (128, 11008, "bf16"), (512, 14336, "bf16"), (8192, 8192, "bf16"), (256, 4096, "fp16"), (512, 14336, "fp16"),
    ]
    check_only = [(3, 24, "bf16"), (5, 40960, "bf16"), (7, 1032, "fp16"), (2, 65536, "fp16"), (33, 16384, "bf16")]
    rows = []
    for T, Hd, dn in timed + check_only:
        dt = dmap[dn]
        shape = f"{T}x{Hd}"
        checks: dict[str, str] = {}
        g = torch.Generator(device=dev).manual_seed(T * 7 + Hd)
        x0 = torch.randn(T, Hd, device=dev, generator=g).to(dt)
        r0 = torch.randn(T, Hd, device=dev, generator=g).to(dt)
        w = (1 + 0.1 * torch.randn(Hd, device=dev, generator=g)).to(dt)
        for castx in (False, True):
            exp_out, exp_res = ref(x0, r0, w, castx)
            export = f"far_{'castx' if castx else 'plain'}_{dn}"
            got = {}
            for impl in ("far_orig", "far_cand"):
                f = fn(impl, export)
                if f is None:
                    continue
                x, r = x0.clone(), r0.clone()
                try:
                    f(x, r, w, eps)
                    torch.cuda.synchronize()
                except Exception as e:
                    checks[f"{impl[4:]}{'/castx' if castx else ''}"] = "unsupported" if impl == "far_orig" else "ERROR"
                    if impl != "far_orig":
                        chk.record(False, f"far {impl} {shape} {dn} castx={castx} raised {str(e).splitlines()[0][:100]}")
                    continue
                got[impl] = (x, r)
                ok = _close(torch, x, exp_out, dt) and bool(torch.equal(r, exp_res))
                checks[f"{impl[4:]}{'/castx' if castx else ''}"] = chk.record(
                    ok, f"far {impl} {shape} {dn} castx={castx} vs fp32 reference (max err {_err(x, exp_out):.2e}, "
                        f"residual exact={bool(torch.equal(r, exp_res))})")
            if "far_orig" in got and "far_cand" in got:
                xo, xc = got["far_orig"][0], got["far_cand"][0]
                nd = int((xo != xc).sum())
                checks[f"cand==orig{'/castx' if castx else ''}"] = "bitwise" if nd == 0 else f"{nd} elems differ (max {_err(xo, xc):.1e})"
        if (T, Hd, dn) in check_only:
            continue
        es = x0.element_size()
        per_set = 2 * T * Hd * es
        mb = (4 * T * Hd * es + Hd * es) / 1e6
        n = nsets_for(per_set)
        xs = [x0.clone() for _ in range(n)]
        rs_ = [r0.clone() for _ in range(n)]
        impls: dict[str, Callable[[int], Any]] = {}
        plain = f"far_plain_{dn}"
        for label, mod_name in (("orig", "far_orig"), ("cand", "far_cand"), ("cand_nopdl", "far_cand_nopdl"),
                                ("cand_t256", "far_cand_t256"), ("cand_t1024", "far_cand_t1024")):
            f = fn(mod_name, plain)
            if f is None:
                continue
            if label == "orig" and Hd > 8192:
                continue
            impls[label] = (lambda i, f=f: f(xs[i], rs_[i], w, eps))
        fi = fn("far_flashinfer", f"fi_far_{dn}")
        if fi is not None:
            impls["flashinfer"] = lambda i: fi(xs[i], rs_[i], w, eps, True)
        times = timer.run(impls, n)
        base = "orig" if "orig" in times else "flashinfer"
        row = Row("fused_add_rmsnorm", shape, dn, mb, n * per_set >= COLD_BYTES, times, checks, base)
        rows.append(row)
        print("  " + row.line(CEILING[0], list(impls)), flush=True)
        del xs, rs_
    return rows


def run_act(torch: Any, mods: dict[str, Any], timer: Timer, chk: Checker) -> list[Row]:
    dev = "cuda"
    dmap = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

    def ref(inp: Any, kind: str = "silu", rounding: bool = False, clamp: float = 0.0) -> Any:
        H = inp.shape[-1] // 2
        g, u = inp[:, :H].float(), inp[:, H:].float()
        if clamp > 0:
            lim = float(torch.tensor(clamp, dtype=inp.dtype))
            g = torch.where(g > lim, torch.full_like(g, lim), g)
            u = u.clamp(-lim, lim)
        if kind == "silu":
            a = g / (1 + torch.exp(-g))
        elif kind == "gelu":
            a = torch.nn.functional.gelu(g)
        else:
            a = torch.nn.functional.gelu(g, approximate="tanh")
        if rounding:
            a = a.to(inp.dtype).float()
        return (a * u).to(inp.dtype)

    def get(mod: str, export: str) -> Optional[Callable]:
        m = mods.get(mod)
        return getattr(m, export, None) if m is not None else None

    # 1. every export of the candidate against the original (and the reference), small odd shapes.
    for dn, dt in dmap.items():
        vec = 16 // torch.tensor([], dtype=dt).element_size()
        N, H = 67, 24 * vec
        g = torch.Generator(device=dev).manual_seed(5)
        inp = (torch.randn(N, 2 * H, device=dev, generator=g) * 3).to(dt)
        eids_by_step = {s: torch.randint(-1, 3, (math.ceil(N / s),), device=dev, dtype=torch.int32, generator=g)
                        for s in (1, 4)}
        sorted_ids = torch.randint(0, 80, (N,), device=dev, dtype=torch.int32, generator=g)
        npost = torch.tensor([60], device=dev, dtype=torch.int32)
        results: dict[str, dict[str, Any]] = {}
        for impl in ("orig", "cand"):
            mod = f"act_{impl}_{dn}"
            if mods.get(mod) is None:
                continue
            res = {}
            for kind in ("silu", "gelu", "gelu_tanh"):
                out = torch.full((N, H), float("nan"), device=dev, dtype=dt)
                get(mod, f"run_activation_{dn}")(inp, out, kind)
                res[f"act/{kind}"] = out
                out = torch.full((N, H), float("nan"), device=dev, dtype=dt)
                get(mod, f"run_activation_with_rounding_{dn}")(inp, out, kind, 0.0)
                res[f"round/{kind}"] = out
            out = torch.full((N, H), float("nan"), device=dev, dtype=dt)
            get(mod, f"run_activation_with_rounding_{dn}")(inp, out, "silu", 1.5)
            res["round/silu/clamp1.5"] = out
            buf = inp.clone()
            get(mod, f"run_activation_with_rounding_input_inplace_{dn}")(buf, buf[:, :H], "silu")
            res["inplace/silu"] = buf
            for step, eids in eids_by_step.items():
                out = torch.full((N, H), float("nan"), device=dev, dtype=dt)
                get(mod, f"run_activation_filtered_{dn}")(inp, out, eids, step, "silu")
                res[f"filtered/step{step}"] = out
            out = torch.full((N, H), float("nan"), device=dev, dtype=dt)
            get(mod, f"run_activation_sorted_filtered_{dn}")(inp, out, eids_by_step[4], 4, sorted_ids, npost, 70, "silu")
            res["sorted_filtered"] = out
            out = torch.full((N, 2 * H), float("nan"), device=dev, dtype=dt)
            get(mod, f"run_unary_activation_{dn}")(inp, out, "relu2")
            res["unary/relu2"] = out
            torch.cuda.synchronize()
            results[impl] = res
        if "cand" not in results:
            chk.record(False, f"act cand {dn}: module missing")
            continue
        c = results["cand"]
        # reference checks for the plain paths
        for kind in ("silu", "gelu", "gelu_tanh"):
            chk.record(_close(torch, c[f"act/{kind}"], ref(inp, kind), dt), f"act cand {dn} run_activation {kind} vs reference")
            chk.record(_close(torch, c[f"round/{kind}"], ref(inp, kind, True), dt),
                       f"act cand {dn} with_rounding {kind} vs reference")
        chk.record(_close(torch, c["round/silu/clamp1.5"], ref(inp, "silu", True, 1.5), dt), f"act cand {dn} clamp vs reference")
        chk.record(_close(torch, c["inplace/silu"][:, :H], ref(inp, "silu", True), dt) and bool(
            torch.equal(c["inplace/silu"][:, H:], inp[:, H:])), f"act cand {dn} inplace vs reference")
        relu2 = (torch.relu(inp.float()) ** 2).to(dt)
        chk.record(_close(torch, c["unary/relu2"], relu2, dt), f"act cand {dn} relu2 vs reference")
        if "orig" in results:
            o = results["orig"]
            diffs = []
            for k in o:
                a, b = o[k], c[k]
                # unwritten (filtered) rows stay NaN in both; everything else within tolerance of the original
                chk.record(_close(torch, b, a, dt), f"act cand {dn} {k} vs original (max {_err(a, b):.1e})")
                nd = int(((a != b) & ~(a.isnan() & b.isnan())).sum())
                if nd:
                    diffs.append(f"{k}:{nd} elems (max {_err(a, b):.1e})")
            print(f"    act {dn}: candidate vs original on all six exports: "
                  f"{'bitwise identical' if not diffs else ', '.join(diffs)}")

    # 2. timing of silu_and_mul (run_activation "silu")
    timed = [(1, 11008, "bf16"), (16, 14336, "bf16"), (128, 11008, "bf16"), (128, 14336, "bf16"),
             (1024, 14336, "bf16"), (8192, 14336, "bf16"), (128, 11008, "fp16"), (128, 11008, "fp32")]
    rows = []
    for T, H, dn in timed:
        dt = dmap[dn]
        es = torch.tensor([], dtype=dt).element_size()
        shape = f"{T}x{2 * H}"
        g = torch.Generator(device=dev).manual_seed(T + H)
        inp0 = torch.randn(T, 2 * H, device=dev, generator=g).to(dt)
        checks = {}
        ro = ref(inp0)
        outs_chk = {}
        for impl in ("orig", "cand"):
            f = get(f"act_{impl}_{dn}", f"run_activation_{dn}")
            if f is None:
                continue
            out = torch.full((T, H), float("nan"), device=dev, dtype=dt)
            f(inp0, out, "silu")
            torch.cuda.synchronize()
            outs_chk[impl] = out
            checks[impl] = chk.record(_close(torch, out, ro, dt), f"silu {impl} {shape} {dn} vs reference (max err {_err(out, ro):.2e})")
        if len(outs_chk) == 2:
            nd = int((outs_chk["orig"] != outs_chk["cand"]).sum())
            checks["cand==orig"] = "bitwise" if nd == 0 else f"{nd} differ"
        per_set = 3 * T * H * es
        n = nsets_for(per_set)
        ins = [inp0.clone() for _ in range(n)]
        outs = [torch.empty(T, H, device=dev, dtype=dt) for _ in range(n)]
        impls: dict[str, Callable[[int], Any]] = {}
        for label, mod in (("orig", f"act_orig_{dn}"), ("cand", f"act_cand_{dn}"), ("cand_vpt1", "act_cand_vpt1"),
                           ("cand_vpt4", "act_cand_vpt4"), ("cand_early", "act_cand_early")):
            if label.startswith("cand_") and dn != "bf16":
                continue
            f = get(mod, f"run_activation_{dn}" if not label.startswith("cand_") else "run_activation_bf16")
            if f is not None:
                impls[label] = (lambda i, f=f: f(ins[i], outs[i], "silu"))
        times = timer.run(impls, n)
        row = Row("silu_and_mul", shape, dn, per_set / 1e6, n * per_set >= COLD_BYTES, times, checks, "orig")
        rows.append(row)
        print("  " + row.line(CEILING[0], list(impls)), flush=True)
        del ins, outs
    return rows


CEILING = [0.0]  # GB/s, measured at start


def measure_ceiling(torch: Any, copy16: Callable, timer: Timer) -> float:
    n = 2**30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    a.fill_(1)
    t = timer.run({"copy": lambda i: copy16(a, b)}, 4)["copy"]["us"]
    del a, b
    return 2 * n / (t * 1e-6) / 1e9


def warm_gpu(torch: Any, seconds: float = 2.0) -> None:
    x = torch.randn(4096, 4096, device="cuda")
    t0 = time.time()
    while time.time() - t0 < seconds:
        for _ in range(20):
            x = x @ x
            x = x / x.norm()
        torch.cuda.synchronize()


# --------------------------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default="merge_state,fused_add_rmsnorm,silu_and_mul")
    ap.add_argument("--compile-only", action="store_true", help="build (and ptxas-report) only; no GPU needed")
    ap.add_argument("--with-broken", action="store_true", help="also build tests/candidates/*/{broken,scripted}/*.cuh")
    ap.add_argument("--sweep", action="store_true", help="sweep merge_state rows/warps (bf16 shapes)")
    ap.add_argument("--sglang-root", default=None)
    ap.add_argument("--flashinfer-include", default=None)
    ap.add_argument("--build-dir", default=str(REPO / "build" / "gpu_candidates_check"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    ap.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds (median reported)")
    args = ap.parse_args()
    os.environ.setdefault("CUDA_HOME", "/usr/local/cuda")
    ops = set(args.ops.split(","))
    t_start = time.time()
    src = find_sources(args)
    print("sources:\n  " + "\n  ".join(src.notes))
    report: dict[str, Any] = {"sources": src.notes, "builds": {}, "rows": [], "failures": []}

    mods: dict[str, Any] = {}
    if ops & {"fused_add_rmsnorm", "silu_and_mul"} or args.compile_only:
        if src.jit_include is None:
            print("ERROR: SGLang's kernels/jit/include not found (extracted/<op>/src, --sglang-root, or sglang installed)")
            return 2
        build_root = Path(args.build_dir)
        stub = build_root / "stub_include"
        stub.mkdir(parents=True, exist_ok=True)
        for h in ("cublasLt.h", "cublas_v2.h", "curand_kernel.h"):  # FlashInfer includes them, never uses them
            (stub / h).write_text("#pragma once\n")
        specs = module_specs(src, stub, args.with_broken)
        want = [s for s in specs if s.name == "util" or args.compile_only
                or (s.name.startswith("far") and "fused_add_rmsnorm" in ops)
                or (s.name.startswith("act") and "silu_and_mul" in ops)]
        print(f"building {len(want)} modules with {args.jobs} jobs ...", flush=True)
        built = build_all(want, src, build_root, args.jobs)
        for name, b in sorted(built.items()):
            report["builds"][name] = {"ok": b.ok, "seconds": round(b.seconds, 1), "resources": b.resources,
                                      "expect_fail": b.spec.expect_fail}
        bad = [n for n, b in built.items() if b.ok == b.spec.expect_fail]
        print("\nptxas resources (candidates):")
        for name, b in sorted(built.items()):
            if b.ok and ("cand" in name or "broken" in name or "scripted" in name):
                for r in sorted(set(b.resources)):
                    print(f"  {name:28s} {r}")
        if bad:
            print(f"\nBUILD PROBLEMS: {bad}")
            report["failures"] += [f"build {n}" for n in bad]
        if args.compile_only:
            _write(report)
            print(f"\ncompile-only done in {time.time() - t_start:.0f}s")
            return 1 if bad else 0
        import tvm_ffi

        for name, b in built.items():
            if b.ok and not b.spec.expect_fail:
                mods[name] = tvm_ffi.load_module(str(b.so.resolve()))

    import torch

    if not torch.cuda.is_available():
        print("ERROR: no CUDA device")
        return 2
    print(f"\ndevice: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    warm_gpu(torch)
    timer = Timer(torch, args.rounds)
    if "util" in mods:
        CEILING[0] = measure_ceiling(torch, mods["util"].copy16, timer)
    else:
        CEILING[0] = 4279.0
    print(f"copy ceiling: {CEILING[0]:.0f} GB/s (16 B/thread copy, 1 GiB, CUDA graph)")
    report["ceiling_gbs"] = CEILING[0]
    chk = Checker()
    rows: list[Row] = []
    print("\ncolumns: impl=median us, % of copy ceiling (minimal bytes), speedup vs the first impl")
    if "merge_state" in ops:
        print("\nmerge_state (Triton; orig = SGLang merge_state_triton)")
        rows += run_merge_state(torch, src, timer, chk, args.sweep)
    if "fused_add_rmsnorm" in ops:
        print("\nfused_add_rmsnorm (orig = SGLang JIT, refuses H > 8192; flashinfer = AOT serving kernel, PDL on;"
              " cand_nopdl/t256/t1024 = compile-time variants of the candidate)")
        rows += run_far(torch, mods, timer, chk)
    if "silu_and_mul" in ops:
        print("\nsilu_and_mul (orig = SGLang JIT activation.cuh; cand_vpt1/vpt4/early = variants)")
        rows += run_act(torch, mods, timer, chk)
    for r in rows:
        report["rows"].append({"op": r.op, "shape": r.shape, "dtype": r.dtype, "mb": r.mb, "cold_l2": r.cold,
                               "times": r.times, "checks": r.checks, "baseline": r.base})
    # geometric means of cand vs its baseline per op
    print("\nsummary (geometric mean of cand speedup over each op's baseline, timed shapes):")
    summary = {}
    for op in sorted({r.op for r in rows}):
        sp = [r.times[r.base]["us"] / r.times["cand"]["us"] for r in rows
              if r.op == op and "cand" in r.times and r.base in r.times]
        if sp:
            gm = math.exp(sum(math.log(s) for s in sp) / len(sp))
            summary[op] = gm
            print(f"  {op:18s} {gm:5.2f}x over {len(sp)} shapes")
    report["summary_geomean"] = summary
    report["failures"] += chk.failures
    report["wall_s"] = time.time() - t_start
    print(f"\ncorrectness failures: {len(chk.failures)}")
    for f in chk.failures:
        print(f"  - {f}")
    print(f"total wall time {report['wall_s']:.0f}s")
    _write(report)
    return 1 if chk.failures else 0


def _write(report: dict[str, Any]) -> None:
    out = os.environ.get("OUT")
    if out:
        p = Path(out) / "gpu_candidates_check.json"
        p.write_text(json.dumps(report, indent=1, default=str))
        print(f"wrote {p}")


if __name__ == "__main__":
    sys.exit(main())
