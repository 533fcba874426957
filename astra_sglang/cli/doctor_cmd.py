"""``astra-sglang doctor``: what this host has for each stage, and which patches would serve here and why not.

The first thing to run when a patch is not used or a build fails: every line names a fact of this host (SGLang's
version and place, the GPU, the toolchain, the cache, the optimizer extra) with the reason when it is missing.
Plain text without rich, so it works in a serving-only install.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from pydantic import Field

from astra_sglang.contract.base import Model
from astra_sglang.errors import AstraError
from astra_sglang.platform_info import current


class Fact(Model):
    name: str
    ok: bool
    detail: str


class PatchFact(Model):
    patch_id: str
    op: str
    applies_here: bool
    why_not: str | None = None
    validated_here: bool
    validation: str
    builds_here: bool = Field(description="its kernel can be built in this environment (toolchain, SGLang's headers)")
    build_problem: str | None = None


class DoctorReport(Model):
    facts: list[Fact]
    patches_env: str
    patches: list[PatchFact]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("doctor", help="what this host has (SGLang, GPU, toolchain, cache) and which "
                              "patches apply here", description=__doc__)
    p.add_argument("--json", action="store_true", help="the report as JSON")
    p.set_defaults(handler=handle)


def _dist_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _sglang() -> Fact:
    from astra_sglang.extract.sglang_env import sglang_root

    v = _dist_version("sglang")
    try:
        where = str(sglang_root())
    except AstraError as e:
        return Fact(name="sglang", ok=False, detail=str(e))
    return Fact(name="sglang", ok=True, detail=f"{v or 'unknown version'} at {where}")


def _gpu() -> tuple[Fact, str | None]:
    """The GPU fact and the arch the patch registry matches (sm_XY, cpu-interpret under TRITON_INTERPRET=1)."""
    if importlib.util.find_spec("torch") is None:
        return Fact(name="gpu", ok=False, detail="torch is not installed"), None
    import torch

    here = current()
    if not here.cuda:
        why = f"no CUDA GPU visible to torch {torch.__version__} (CUDA {torch.version.cuda or 'none'})"
        return Fact(name="gpu", ok=False, detail=why + ("; TRITON_INTERPRET=1: Triton ops run on CPU"
                                                         if here.interpreted else "")), here.arch
    detail = (f"{here.name} ({here.arch}), {torch.cuda.device_count()} visible, torch "
              f"{torch.__version__}, CUDA {torch.version.cuda}")
    return Fact(name="gpu", ok=True, detail=detail), here.arch


def _tool(name: str, probe) -> Fact:
    try:
        return Fact(name=name, ok=True, detail=str(probe()))
    except AstraError as e:
        return Fact(name=name, ok=False, detail=str(e))


def _toolchain() -> list[Fact]:
    from astra_sglang.loader import toolchain

    def nvcc() -> str:
        return f"{toolchain.nvcc_path()} ({toolchain.nvcc_version()})"

    def tvm_ffi() -> str:
        return f"{toolchain.tvm_ffi_version()} at {toolchain.tvm_ffi_paths()[0].parent}"

    return [_tool("nvcc", nvcc), _tool("ninja", toolchain.ninja_path), _tool("tvm-ffi", tvm_ffi)]


def _size(root: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def _cache() -> Fact:
    from astra_sglang.data_paths import CACHE_ENV, user_cache

    root = user_cache()
    if not root.is_dir():
        return Fact(name="cache", ok=True, detail=f"{root} (not created yet; ${CACHE_ENV} moves it)")
    return Fact(name="cache", ok=True, detail=f"{root}, {_size(root) / 2**20:.1f} MiB (${CACHE_ENV} moves it)")


def _optimizer_extra() -> Fact:
    have = {n: _dist_version(n) for n in ("openai-agents", "rich", "matplotlib")}
    missing = [n for n, v in have.items() if v is None]
    detail = ", ".join(f"{n} {v}" for n, v in have.items() if v)
    if missing:
        detail = (detail + "; " if detail else "") + (f"missing {', '.join(missing)}: `pip install "
                                                      f"'astra-sglang[agents]'` for `optimize`")
    return Fact(name="optimizer extra", ok=have["openai-agents"] is not None, detail=detail)


def _patches(arch: str | None) -> list[PatchFact]:
    from astra_sglang.patches.registry import (
        build_problem,
        device_problem,
        discover,
        installed_sglang_version,
        static_problem,
        validated_here,
    )

    sglang = installed_sglang_version()
    gpu = current().gpu if arch and arch.startswith("sm_") else None
    out = []
    for e in discover():
        problem = static_problem(e, sglang) or (device_problem(e.manifest, arch, gpu) if e.manifest else None)
        ok, why = validated_here(e, sglang, arch, gpu)
        cannot = build_problem(e.manifest) if e.manifest else "unreadable manifest"
        out.append(PatchFact(patch_id=e.patch_id, op=e.op, applies_here=problem is None, why_not=problem,
                             validated_here=ok, validation=why, builds_here=cannot is None, build_problem=cannot))
    return out


def report() -> DoctorReport:
    from astra_sglang import __version__
    from astra_sglang.patches.registry import patches_root

    gpu, arch = _gpu()
    facts = [Fact(name="astra-sglang", ok=True, detail=f"{__version__}; patch registry {patches_root()}"),
             _sglang(), gpu, *_toolchain(), _cache(), _optimizer_extra()]
    return DoctorReport(facts=facts, patches_env=os.environ.get("ASTRA_SGLANG_PATCHES", ""), patches=_patches(arch))


def handle(args: argparse.Namespace) -> int:
    r = report()
    if args.json:
        print(r.model_dump_json(indent=2))
        return 0
    width = max(len(f.name) for f in r.facts)
    for f in r.facts:
        print(f"{f.name:<{width}}  {'ok  ' if f.ok else 'MISS'}  {f.detail}")
    env = r.patches_env or "unset: patches off"
    print(f"patches (ASTRA_SGLANG_PATCHES={env}):" if r.patches else "patches: none in the registry")
    for p in r.patches:
        verdict = "applies here" if p.applies_here else f"does not apply: {p.why_not}"
        print(f"  {p.patch_id} ({p.op}): {verdict}; validated here: "
              f"{'yes' if p.validated_here else 'no'} ({p.validation}); builds here: "
              f"{'yes' if p.builds_here else 'no (' + (p.build_problem or '').removeprefix('cannot build here: ') + ')'}")
    return 0
