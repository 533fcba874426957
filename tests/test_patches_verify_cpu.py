"""``patches verify`` on a host without a GPU: it says why it cannot check here and exits non-zero, and writes
nothing to the state file unless ``--record`` was given (a failure record would mark the patch failed here)."""

from __future__ import annotations

import pytest

from astra_sglang.cli.main import main

pytest.importorskip("sglang")  # verify compares with the installed SGLang's function

CASES = {
    # SGLang's original of silu_and_mul is a CUDA JIT kernel: nothing to check the Triton patch against on CPU
    ("triton-silu-and-mul-v1", "1"): "SGLang's original silu_and_mul is a cuda_jit kernel, which needs a GPU",
    ("triton-silu-and-mul-v1", ""): "SGLang's original silu_and_mul is a cuda_jit kernel, which needs a GPU",
    ("fused-add-rmsnorm-mr-k4", "1"): "a cuda_jit patch needs a GPU and this host has none",
    ("merge-state-mr-k1", ""): "a Triton patch of a Triton op can be checked on CPU with TRITON_INTERPRET=1",
}


@pytest.mark.parametrize(("pid", "interpret"), list(CASES), ids=[f"{p}-interp{i or 0}" for p, i in CASES])
def test_verify_without_gpu_says_why_and_writes_no_record(pid, interpret, tmp_path, monkeypatch, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU host verifies for real")
    state = tmp_path / "state.json"
    monkeypatch.setenv("ASTRA_SGLANG_STATE_FILE", str(state))
    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    monkeypatch.delenv("ASTRA_SGLANG_PATCHES_DIR", raising=False)
    assert main(["patches", "verify", pid]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{pid}: NOT VERIFIED on ") and "cannot verify here: " in out[0], out
    assert CASES[(pid, interpret)] in out[0]
    assert f"astra-sglang patches verify --record {pid}" in out[0] and "tests/test_acceptance_gpu.py" in out[0]
    assert not state.exists()
