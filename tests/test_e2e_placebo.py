"""The placebo arm of ``e2e`` in the plugin's real PatchRuntime (CPU, TRITON_INTERPRET=1, the silu test vehicle).

With ASTRA_SGLANG_PLACEBO set when the hook is made, a call the patch's guard covers is served by SGLang's
original and counted as such: nothing is built or launched. Without it, the same call is the patch's (the
control: the input is covered). The variable is read when the hook is made, not per call.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PID = "triton-silu-and-mul-v1"
TARGET = "sglang.kernels.ops.activation.activation.silu_and_mul"

torch = pytest.importorskip("torch")
pytest.importorskip("triton")


def _original(calls: list[int]):
    import torch.nn.functional as F

    def silu_and_mul(input, out=None, expert_ids=None, expert_step=1, *, sorted_token_ids=None,
                     num_tokens_post_padded=None, num_valid_tokens=0):
        """CPU stand-in for SGLang's JIT silu_and_mul (same signature and semantics)."""
        calls[0] += 1
        d = input.shape[-1] // 2
        out = input.new_empty(*input.shape[:-1], d) if out is None else out
        return out.copy_(F.silu(input[..., :d].float()) * input[..., d:].float())

    return silu_and_mul


@pytest.fixture
def runtime(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("the CPU path (TRITON_INTERPRET=1)")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv("ASTRA_SGLANG_PLACEBO", raising=False)
    from astra_sglang.contract.patch import load_patch_manifest
    from astra_sglang.patches import status
    from astra_sglang.patches.runtime import PatchRuntime

    d = REPO / "patches" / "silu_and_mul" / PID
    status.reset(PID)

    def make() -> PatchRuntime:
        status.reset(PID)
        return PatchRuntime(d, load_patch_manifest(d))

    yield make
    status.reset(PID)


def test_placebo_hook_serves_covered_calls_with_the_original_and_counts_them(runtime, monkeypatch):
    from astra_sglang.patches import counters, statuses

    monkeypatch.setenv("ASTRA_SGLANG_PLACEBO", "1")
    rt = runtime()
    calls = [0]
    hook = rt.hook_for(_original(calls), TARGET)
    x = torch.randn(4, 2 * 256).to(torch.bfloat16)         # inside the guard: the patch would serve it
    y = hook(x)
    monkeypatch.delenv("ASTRA_SGLANG_PLACEBO")              # read at hook creation: the hook stays a placebo
    hook(x)
    assert calls[0] == 2
    assert counters()[PID] == {"patch": 0, "original": 2}
    assert statuses()[PID].state == "pending" and "placebo" in statuses()[PID].reason
    assert rt.kernel is None                                # nothing built, nothing checked
    assert torch.equal(y, _original([0])(x))
    assert hook.astra_patch_id == PID                       # still recognisable as the patch's hook


def test_without_placebo_the_same_call_is_the_patchs(runtime, monkeypatch):
    from astra_sglang.patches import counters, statuses

    rt = runtime()
    calls = [0]
    hook = rt.hook_for(_original(calls), TARGET)
    monkeypatch.setenv("ASTRA_SGLANG_PLACEBO", "1")         # too late: this hook is the patch's
    hook(torch.randn(4, 2 * 256).to(torch.bfloat16))
    assert counters()[PID] == {"patch": 1, "original": 0}
    assert statuses()[PID].state == "active"


def test_startup_line_says_placebo_only_when_it_is_one(runtime, monkeypatch):
    from astra_sglang.patches.install import startup_line

    rt = runtime()
    assert "placebo" not in startup_line({PID: rt})
    monkeypatch.setenv("ASTRA_SGLANG_PLACEBO", "1")
    line = startup_line({PID: rt})
    assert "placebo (ASTRA_SGLANG_PLACEBO): hooks installed, SGLang's originals serve every call" in line
    assert "placebo" not in startup_line({})                # nothing installed: no hooks to speak of
