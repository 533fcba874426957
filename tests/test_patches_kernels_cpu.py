"""Patches of the other two paper ops, on CPU: the registry's one-command `add` plus the plugin's runtime.

merge_state (a Triton op) runs end to end under TRITON_INTERPRET=1 against SGLang's original rebuilt from
extracted/merge_state (the devcheck path used on the H200); a .cuh patch of a cuda_jit op is built by the
plugin's own loader path (compile and load; running it needs a GPU).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_sglang.cli.main import main

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES_DIR", str(tmp_path / "patches"))
    monkeypatch.setenv("ASTRA_SGLANG_STATE_FILE", str(tmp_path / "state.json"))
    return tmp_path / "patches"


def test_merge_state_patch_serves_covered_calls_and_matches_the_extracted_original(root, monkeypatch, restored_op):
    restored_op("merge_state")  # the original is rebuilt from it
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("the CPU path; on a GPU see test_acceptance_gpu.py")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # read when the kernel modules are imported (fresh, by path)
    from astra_sglang.contract.patch import load_patch_manifest, write_patch_manifest
    from astra_sglang.patches import counters, status
    from astra_sglang.patches.registry import discover
    from astra_sglang.patches.runtime import PatchRuntime
    from astra_sglang.patches.tooling.devcheck import extracted_original

    src = REPO / "tests" / "candidates" / "merge_state" / "hand_written.py"
    assert main(["patches", "add", "--op", "merge_state", "--source", str(src), "--id", "hw-merge",
                 "--provenance", "hand-written", "--sglang-version", "0.5.23", "--arch", "cpu-interpret"]) == 0
    d = root / "merge_state" / "hw-merge"
    m = load_patch_manifest(d)
    m.check_shapes = [{"T": 3, "NH": 4, "D": 96}, {"T": 5, "NH": 8, "D": 128}]  # small: the interpreter is slow
    write_patch_manifest(d, m)
    entry = discover()[0]
    original = extracted_original(entry)
    status.reset("hw-merge")
    rt = PatchRuntime(entry.path, entry.manifest)
    hook = rt.hook_for(original, m.targets[0])
    assert m.targets == ["sglang.kernels.ops.attention.merge_state.merge_state_triton"]
    # head dim 128: the default guard spans the contract's shapes (D 96..256), so D 64 would go to the original
    args = [torch.randn(4, 8, 128).bfloat16(), torch.randn(4, 8), torch.randn(4, 8, 128).bfloat16(), torch.randn(4, 8)]
    out, lse = hook(*args)                                   # first covered call: activation, then served
    assert status.statuses()["hw-merge"].state == "active"
    ref_out, ref_lse = original(*args)
    assert torch.allclose(out.float(), ref_out.float(), atol=2e-2, rtol=2e-2) and torch.allclose(lse, ref_lse)
    assert counters()["hw-merge"] == {"patch": 1, "original": 0}
    hook(*[a.float() for a in args])                         # float32 is outside the guard
    assert counters()["hw-merge"] == {"patch": 1, "original": 1}


@pytest.mark.nvcc
def test_cuda_patch_builds_through_the_plugin_loader(root, restored_op):
    restored_op("silu_and_mul")  # the patch is built against SGLang's headers in it
    from astra_sglang.patches.kernels import load_kernel
    from astra_sglang.patches.registry import discover, load_op

    src = REPO / "tests" / "candidates" / "silu_and_mul" / "hand_written.cuh"
    assert main(["patches", "add", "--op", "silu_and_mul", "--source", str(src), "--id", "hw-silu-cuda",
                 "--provenance", "hand-written", "--sglang-version", "0.5.23", "--arch", "sm_90"]) == 0
    e = discover()[0]
    # one dtype: `patches add` above already compiled both; what is shown here is the loader's own build of the
    # registered copy (another path: another cache key), and one nvcc build fewer shows it as well
    kernel = load_kernel(e.path, e.manifest, load_op(e.manifest), dtypes=["bfloat16"], arch="sm_90a")
    assert callable(kernel)
