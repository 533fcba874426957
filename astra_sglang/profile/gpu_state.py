"""What the GPU did while one forward process ran: its clocks, temperature, power and throttle reasons.

Separate processes with identical kernels differ by 3-6% in decode step time on the H200 (2026-12-03), and one
machine ran 5-13% slower than another for the same kernels (2026-12-04): the noise every e2e claim must beat. Its
cause was never measured. Each forward process now samples NVML in a background thread (every 50 ms: SM and
memory clocks, temperature, power, the clock-event reasons) and prints one ``ASTRA-GPU {json}`` line at exit;
``e2e`` keeps it per process and reports, per batch size, whether the slower processes were the ones on lower
clocks (a rank correlation over processes, each relative to its arm's median so the patch's own effect drops
out). Where NVML is missing the line is absent and the report says so: nothing is guessed.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from astra_sglang.contract.base import Model

GPU_LINE = "ASTRA-GPU "
PERIOD_S = 0.05
# NVML's clocks event reasons (nvmlClocksEventReason*, formerly ClocksThrottleReason*), by bit
REASONS = {0x1: "gpu idle", 0x2: "applications clocks setting", 0x4: "software power cap", 0x8: "hardware slowdown",
           0x10: "sync boost", 0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
           0x80: "hardware power brake", 0x100: "display clock setting"}


class GpuState(Model):
    """One process's GPU, summarised over its samples (all taken while it ran, idle moments included)."""

    gpu: str = ""
    samples: int
    sm_mhz_median: float
    sm_mhz_min: float
    mem_mhz_median: float
    temp_c_max: float | None = None
    power_w_median: float | None = None
    reasons: list[str] = Field(default_factory=list, description="clock-event reasons seen in any sample, "
                                                                 "'gpu idle' left out")


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return (s[n // 2] + s[(n - 1) // 2]) / 2


class Sampler:
    """NVML samples of one GPU on a daemon thread, from ``start`` to ``stop``. ``nvml``: the pynvml module (tests
    hand in a stand-in); None: imported here, and where it cannot be the sampler does nothing."""

    def __init__(self, nvml: Any = None, index: int | None = None, period_s: float = PERIOD_S):
        self.period_s = period_s
        self.rows: list[tuple[float, float, float | None, float | None, int]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.nvml, self.handle, self.name = None, None, ""
        try:
            if nvml is None:
                import pynvml as nvml  # type: ignore[import-not-found,import-untyped,unused-ignore,no-redef]
            nvml.nvmlInit()
            self.handle = nvml.nvmlDeviceGetHandleByIndex(_first_visible() if index is None else index)
            name = nvml.nvmlDeviceGetName(self.handle)
            self.name = name.decode() if isinstance(name, bytes) else str(name)
            self.nvml = nvml
        except Exception:  # noqa: BLE001 - no NVML, no GPU: no samples, and the report says so
            self.nvml = None

    def _sample(self) -> None:
        n, h = self.nvml, self.handle
        assert n is not None
        sm = float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))
        mem = float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM))
        temp = power = None
        reasons = 0
        try:
            temp = float(n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU))
            power = n.nvmlDeviceGetPowerUsage(h) / 1000.0
            reasons = int(n.nvmlDeviceGetCurrentClocksEventReasons(h) if hasattr(
                n, "nvmlDeviceGetCurrentClocksEventReasons") else n.nvmlDeviceGetCurrentClocksThrottleReasons(h))
        except Exception:  # noqa: BLE001 - a field this driver does not give stays None
            pass
        self.rows.append((sm, mem, temp, power, reasons))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._sample()
            except Exception:  # noqa: BLE001 - a failed sample is one fewer sample
                pass
            self._stop.wait(self.period_s)

    def start(self) -> Sampler:
        if self.nvml is not None:
            self._thread = threading.Thread(target=self._run, name="astra-gpu-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> GpuState | None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        if not self.rows:
            return None
        sm = [r[0] for r in self.rows]
        temps = [r[2] for r in self.rows if r[2] is not None]
        powers = [r[3] for r in self.rows if r[3] is not None]
        seen = 0
        for r in self.rows:
            seen |= r[4]
        return GpuState(gpu=self.name, samples=len(self.rows), sm_mhz_median=_median(sm), sm_mhz_min=min(sm),
                        mem_mhz_median=_median([r[1] for r in self.rows]), temp_c_max=max(temps) if temps else None,
                        power_w_median=_median(powers) if powers else None,
                        reasons=[name for bit, name in REASONS.items() if seen & bit and bit != 0x1])


def this_gpu(nvml: Any = None) -> str:
    """The model of the GPU a forward started here would run on (NVML's name); "" where NVML cannot say."""
    return Sampler(nvml).name


def _first_visible() -> int:
    """NVML counts every GPU of the host; CUDA_VISIBLE_DEVICES names the one this process uses first (an index)."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def line(state: GpuState | None) -> str:
    return GPU_LINE + (state.model_dump_json() if state is not None else "null")


def from_stdout(stdout: str) -> GpuState | None:
    """The last ``ASTRA-GPU`` line a process printed; None when there is none or it says null."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith(GPU_LINE)]
    if not lines:
        return None
    raw = json.loads(lines[-1][len(GPU_LINE):])
    return GpuState.model_validate(raw) if raw else None


def start_for_this_process() -> Sampler:
    """The forward children call this first; ``report`` at exit prints the line."""
    return Sampler().start()


def report(sampler: Sampler) -> None:
    print(line(sampler.stop()), flush=True)


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Rank correlation (average ranks for ties); None below 3 pairs or for a constant side."""
    if len(xs) != len(ys) or len(xs) < 3:
        return None

    def ranks(v: Sequence[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r

    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sx = sum((a - mx) ** 2 for a in rx) ** 0.5
    sy = sum((b - my) ** 2 for b in ry) ** 0.5
    if sx == 0 or sy == 0:
        return None
    return sum((a - mx) * (b - my) for a, b in zip(rx, ry)) / (sx * sy)


def clock_finding(batch_size: int, rows: Sequence[tuple[str, float, GpuState | None]]) -> str:
    """One sentence for one batch size from (arm, decode step median, GPU state) per process: each step time
    relative to its arm's median (the patch's effect drops out), ranked against the process's median SM clock."""
    by_arm: dict[str, list[float]] = {}
    for arm, step, _ in rows:
        by_arm.setdefault(arm, []).append(step)
    medians = {arm: _median(v) for arm, v in by_arm.items()}
    pairs = [(step / medians[arm], g.sm_mhz_median, g) for arm, step, g in rows if g is not None]
    if len(pairs) < 3:
        return (f"bs {batch_size}: GPU state of {len(pairs)} of {len(rows)} processes (no NVML in the others): "
                "too few to relate step time to clocks")
    rho = spearman([p[0] for p in pairs], [p[1] for p in pairs])
    slow = max(pairs, key=lambda p: p[0])
    fast = min(pairs, key=lambda p: p[0])
    spread = (slow[0] / fast[0] - 1) * 100
    reasons = sorted({r for p in pairs for r in p[2].reasons})
    rho_text = "n/a (one clock for all)" if rho is None else f"{rho:+.2f}"
    return (f"bs {batch_size}: {len(pairs)} processes, step time within its arm spreading {spread:.1f}%; rank "
            f"correlation of step time with median SM clock {rho_text}; slowest at {slow[1]:.0f} MHz (min "
            f"{slow[2].sm_mhz_min:.0f}), fastest at {fast[1]:.0f} MHz" +
            (f"; clock-event reasons seen: {', '.join(reasons)}" if reasons else ""))
