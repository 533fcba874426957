"""The device a process runs on, named one way everywhere.

A patch is validated per device ('sm_90'), built for a compile target ('sm_90a'), recorded from a harness result's
device text ('NVIDIA H200 (sm_90)'), and on CPU runs under the Triton interpreter ('cpu-interpret'). Seven helpers
in five modules used to spell these; one frozen ``Platform`` and the conversions between the spellings live here,
below every layer (stdlib only; torch is imported when a device is asked about, so the serving side stays light).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from astra_sglang.errors import AstraError

#: where a patch was validated: 'sm_90' style compute capabilities, or this (Triton interpreter, CI)
CPU_INTERPRET_ARCH = "cpu-interpret"


@dataclass(frozen=True)
class Platform:
    """``arch``: 'sm_90' for a CUDA device, CPU_INTERPRET_ARCH on CPU under TRITON_INTERPRET=1, else None."""

    arch: str | None
    name: str = ""

    @property
    def cuda(self) -> bool:
        return self.arch is not None and self.arch.startswith("sm_")

    @property
    def gpu(self) -> str | None:
        """The GPU model ('NVIDIA H200') on CUDA, else None: what patches and per-GPU contracts are matched on."""
        return self.name or None if self.cuda else None

    @property
    def interpreted(self) -> bool:
        return self.arch == CPU_INTERPRET_ARCH

    @property
    def build_target(self) -> str | None:
        """The nvcc target SGLang builds for here; None off CUDA."""
        return build_arch(self.arch) if self.cuda and self.arch is not None else None


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def of_device(device: Any) -> Platform:
    """The platform of a torch device ('cuda', 'cuda:1', 'cpu', a torch.device); raises what torch raises."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        major, minor = torch.cuda.get_device_capability(dev)
        return Platform(arch=f"sm_{major}{minor}", name=torch.cuda.get_device_name(dev))
    if dev.type == "cpu" and _interpreting():
        return Platform(arch=CPU_INTERPRET_ARCH, name="cpu (TRITON_INTERPRET=1)")
    return Platform(arch=None, name=dev.type)


def current() -> Platform:
    """This host: its first visible CUDA device, else the interpreter or nothing. Never raises: a broken CUDA
    install reads as no device."""
    try:
        import torch

        if torch.cuda.is_available():
            return of_device("cuda")
    except Exception:
        return Platform(arch=None)
    return Platform(arch=CPU_INTERPRET_ARCH, name="cpu (TRITON_INTERPRET=1)") if _interpreting() else Platform(None)


def arch_of_text(device: str) -> str | None:
    """A harness result's device text -> arch: 'NVIDIA H200 (sm_90)' -> 'sm_90', 'cpu (TRITON_INTERPRET=1)' ->
    CPU_INTERPRET_ARCH."""
    m = re.search(r"sm_?(\d+[a-z]?)", device or "")
    if m:
        return f"sm_{m.group(1)}"
    if "TRITON_INTERPRET" in (device or ""):
        return CPU_INTERPRET_ARCH
    return None


def gpu_of_text(device: str) -> str | None:
    """A harness result's device text -> the GPU's name: 'NVIDIA H200 (sm_90)' -> 'NVIDIA H200'; None off CUDA."""
    m = re.fullmatch(r"\s*(.+?)\s*\(sm_?\d+[a-z]?\)\s*", device or "")
    return m.group(1) if m else None


def same_gpu(a: str, b: str) -> bool:
    """Two spellings of one GPU model (case and spacing aside): 'NVIDIA H200' is not 'NVIDIA H100 80GB HBM3'."""
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


def norm_arch(arch: str) -> str:
    """'sm_90a' and 'sm_90' name the same device: validation is per device, the suffix is a compile target."""
    return re.sub(r"(?<=\d)[a-z]$", "", arch.strip().lower())


def build_arch(arch: str) -> str:
    """The nvcc target SGLang builds for on this device: arch-specific 'a' targets from sm_90 on."""
    digits = arch.removeprefix("sm_")
    return f"sm_{digits}a" if digits.isdigit() and int(digits) >= 90 else arch


def gencode(arch: str) -> tuple[str, int]:
    """'sm_90a' -> ('90a', 900): the gencode target and SGLang's SGL_CUDA_ARCH value."""
    m = re.fullmatch(r"(?:sm_|compute_)?(\d+)([a-z]?)", arch)
    if not m:
        raise AstraError(f"unknown CUDA arch {arch!r}; expected e.g. 'sm_90a'")
    digits = m.group(1)
    major, minor = int(digits[:-1]), int(digits[-1])
    return digits + m.group(2), major * 100 + minor * 10
