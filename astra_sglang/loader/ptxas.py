"""Parse nvcc's ``-Xptxas=-v`` report into per-kernel resources.

Registers, spills and shared memory are the first thing a kernel author (human or agent) needs after "it
compiles", and ptxas prints them for free without a GPU, so every build keeps them.
"""

from __future__ import annotations

import re
import shutil
import subprocess

from astra_sglang.contract.result import KernelResources

_ENTRY = re.compile(r"ptxas info\s*:\s*Compiling entry function '([^']+)'")
_PROPS = re.compile(r"ptxas info\s*:\s*Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"ptxas info\s*:\s*Used (\d+) registers(.*)")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas(log: str, demangle: bool = True) -> list[KernelResources]:
    """One entry per ``__global__`` kernel ptxas compiled; device functions that ptxas lists are skipped."""
    kernels: dict[str, dict[str, int]] = {}
    order: list[str] = []
    current: str | None = None  # the entry whose "Used N registers" line comes next
    props_for: str | None = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            current = m.group(1)
            if current not in kernels:
                kernels[current] = {}
                order.append(current)
            continue
        if m := _PROPS.search(line):
            props_for = m.group(1)
            continue
        if (m := _FRAME.search(line)) and props_for in kernels:
            kernels[props_for].update(stack=int(m.group(1)), spill_st=int(m.group(2)), spill_ld=int(m.group(3)))
            props_for = None
            continue
        if (m := _USED.search(line)) and current is not None:
            entry = kernels[current]
            entry["regs"] = int(m.group(1))
            if s := _SMEM.search(m.group(2)):
                entry["smem"] = int(s.group(1))
            else:
                entry.setdefault("smem", 0)
            current = None
    names = _demangle(order) if demangle else {n: n for n in order}
    return [
        KernelResources(
            kernel=names.get(name, name),
            registers=v.get("regs"),
            spill_stores_bytes=v.get("spill_st"),
            spill_loads_bytes=v.get("spill_ld"),
            smem_bytes=v.get("smem"),
            stack_frame_bytes=v.get("stack"),
        )
        for name, v in ((n, kernels[n]) for n in order)
    ]


def _demangle(names: list[str]) -> dict[str, str]:
    """Readable names for agents; mangled ones are kept when c++filt is missing."""
    tool = shutil.which("c++filt")
    if not names or tool is None:
        return {n: n for n in names}
    try:
        out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return {n: n for n in names}
    lines = out.splitlines()
    if len(lines) != len(names):
        return {n: n for n in names}
    return dict(zip(names, lines))


def resource_lines(log: str) -> str:
    """Just the report lines (what SGLang's SGLANG_JIT_LOG_RESOURCE_USAGE replays), for the build folder."""
    keep = [ln.rstrip() for ln in log.splitlines() if "ptxas info" in ln or "spill" in ln]
    return "\n".join(keep) + ("\n" if keep else "")
