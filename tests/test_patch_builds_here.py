"""A patch builds where SGLang serves, or says at start-up that it cannot.

On the H200 the fused_add_rmsnorm patch failed its first call in SGLang's own forward with "build failed:
flashinfer-python is not installed" (its op folder was restored whole, FlashInfer's baseline headers included, which
the patch's build never reads), after the start-up line had said "patches installed".
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FUSED = "fused-add-rmsnorm-mr-k4"


def _committed_part(op: str, dest: Path) -> Path:
    out = subprocess.run(["git", "ls-files", f"extracted/{op}"], cwd=REPO, capture_output=True, text=True, check=True)
    for rel in out.stdout.split():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / rel, dest / rel)
    return dest / "extracted"


# A serving environment without flashinfer-python: importlib.util.find_spec answers None for it.
NO_FLASHINFER = r'''
import json, sys
sys.modules["flashinfer"] = None
from pathlib import Path
from astra_sglang.loader.cuda_build import CudaBuildSpec, build_batch
from astra_sglang.patches.kernels import extracted_op_dir
from astra_sglang.patches.registry import find, load_op, static_problem
e = find("fused-add-rmsnorm-mr-k4")
folder = extracted_op_dir(e.manifest)
op = load_op(e.manifest)
spec = CudaBuildSpec.from_recipe(folder, op, "bfloat16", kernel_source=e.path / e.manifest.source.file)
built = build_batch([spec])[0]
print("RESULT " + json.dumps({"static_problem": static_problem(e, "0.5.23"), "folder": str(folder),
                              "built": not isinstance(built, Exception), "error": str(built)[-500:]}))
'''


@pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                    reason="needs nvcc (compiles, does not run)")
def test_cuda_patch_builds_without_flashinfer_installed(tmp_path: Path) -> None:
    extracted = _committed_part("fused_add_rmsnorm", tmp_path / "clone")  # what a wheel carries
    env = {**__import__("os").environ, "ASTRA_SGLANG_EXTRACTED_DIR": str(extracted),
           "ASTRA_SGLANG_CACHE": str(tmp_path / "cache"), "ASTRA_SGLANG_PATCHES_DIR": str(REPO / "patches")}
    proc = subprocess.run([sys.executable, "-c", NO_FLASHINFER], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    res = json.loads(lines[-1].removeprefix("RESULT "))
    assert res["static_problem"] is None
    assert res["built"], res["error"]
    folder = Path(res["folder"])
    assert folder.is_relative_to(tmp_path / "cache")
    assert not (folder / "baseline_src").exists()  # FlashInfer's headers: only the harness reads them


def test_startup_line_says_a_cuda_patch_cannot_build_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from astra_sglang.loader import toolchain
    from astra_sglang.patches import install, status

    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))
    monkeypatch.setenv("ASTRA_SGLANG_STATE_FILE", str(tmp_path / "state.json"))
    toolchain.cuda_home.cache_clear()
    status.reset()
    try:
        hooked: list[str] = []
        installed = install.install_selected(lambda target, original, hook: hooked.append(target),
                                             root=REPO / "patches", value=FUSED, sglang_version="0.5.23")
        line = install.startup_line(installed)
    finally:
        toolchain.cuda_home.cache_clear()
        status.reset()
    assert installed == {} and hooked == []  # SGLang's original stays bound: nothing to fail at the first call
    assert f"refused: {FUSED} (cannot build here: nvcc not found at {tmp_path / 'no-cuda'}/bin/nvcc" in line


def test_doctor_and_patches_list_say_whether_each_patch_builds_here(tmp_path: Path) -> None:
    env = {**__import__("os").environ, "CUDA_HOME": str(tmp_path / "no-cuda"),
           "ASTRA_SGLANG_PATCHES_DIR": str(REPO / "patches"), "ASTRA_SGLANG_STATE_FILE": str(tmp_path / "s.json")}
    doctor = subprocess.run([sys.executable, "-m", "astra_sglang", "doctor", "--json"], env=env, capture_output=True,
                            text=True, timeout=300)
    assert doctor.returncode == 0, doctor.stderr
    facts = {p["patch_id"]: p for p in json.loads(doctor.stdout)["patches"]}
    assert facts[FUSED]["builds_here"] is False and "nvcc not found" in facts[FUSED]["build_problem"]
    assert facts["merge-state-mr-k1"]["builds_here"] is True  # Triton: nothing to compile ahead
    listing = subprocess.run([sys.executable, "-m", "astra_sglang", "patches", "list", "--json"], env=env,
                             capture_output=True, text=True, timeout=300)
    assert listing.returncode == 0, listing.stderr
    rows = {r["patch_id"]: r for r in json.loads(listing.stdout)}
    assert rows[FUSED]["builds_here"] is False and "nvcc not found" in rows[FUSED]["build_why"]


@pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                    reason="needs nvcc (compiles, does not run)")
def test_gpu_check_compares_with_the_kernel_sglang_serves() -> None:
    """The GPU check (devcheck) stood SGLang's JIT fused_add_rmsnorm in for the original; it refuses H > 8192 on
    sm_90, so the patch's check shapes at H 11008 and 14336 (which SGLang serves with FlashInfer's kernel, and where
    the patch was measured) failed there (H200, 2026-12-03). The original is now the kernel SGLang serves."""
    from astra_sglang.contract.op import load_manifest
    from astra_sglang.loader.cuda_build import CudaBuildSpec, build_batch
    from astra_sglang.patches.registry import op_folder
    from astra_sglang.patches.tooling.devcheck import served_baseline_always

    folder = op_folder("fused_add_rmsnorm")
    op = load_manifest(folder)
    served = served_baseline_always(op)
    assert served is not None and "flashinfer" in served.name
    assert served_baseline_always(load_manifest(op_folder("merge_state"))) is None  # SGLang's Triton kernel itself
    built = build_batch([CudaBuildSpec.from_recipe(folder, op, "bfloat16", recipe=served.recipe)])[0]
    assert not isinstance(built, Exception), built
