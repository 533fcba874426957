"""One naming of the device: what a patch was validated on, what it is built for, what a result's device text says.

These spellings used to live in seven helpers across five modules; a patch validated on 'sm_90' must match a device
reporting 'sm_90' whichever module asks, and build for 'sm_90a'."""

from __future__ import annotations

import pytest

from astra_sglang import platform_info as pi
from astra_sglang.errors import AstraError


def test_the_spellings_of_one_device_agree() -> None:
    assert pi.arch_of_text("NVIDIA H200 (sm_90)") == "sm_90"
    assert pi.arch_of_text("cpu (TRITON_INTERPRET=1)") == pi.CPU_INTERPRET_ARCH
    assert pi.arch_of_text("cpu") is None
    assert pi.norm_arch("SM_90a") == pi.norm_arch("sm_90") == "sm_90"
    assert pi.build_arch("sm_90") == "sm_90a" and pi.build_arch("sm_80") == "sm_80"
    assert pi.gencode("sm_90a") == ("90a", 900) and pi.gencode("compute_86") == ("86", 860)
    with pytest.raises(AstraError, match="unknown CUDA arch"):
        pi.gencode("hopper")


def test_the_platform_says_what_is_built_and_where_it_is_interpreted(monkeypatch: pytest.MonkeyPatch) -> None:
    h200 = pi.Platform(arch="sm_90", name="NVIDIA H200")
    assert h200.cuda and not h200.interpreted and h200.build_target == "sm_90a"
    cpu = pi.Platform(arch=pi.CPU_INTERPRET_ARCH)
    assert not cpu.cuda and cpu.interpreted and cpu.build_target is None
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert pi.of_device("cpu").arch == pi.CPU_INTERPRET_ARCH
    monkeypatch.delenv("TRITON_INTERPRET")
    assert pi.of_device("cpu").arch is None
    import torch

    if not torch.cuda.is_available():
        assert pi.current() == pi.Platform(arch=None)
