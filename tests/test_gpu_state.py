"""The GPU state a forward process records (profile/gpu_state.py), with a STAND-IN NVML module (no GPU here): what
each sample reads, how a process is summarised, and the rank correlation e2e's noise finding rests on."""

from __future__ import annotations

import time

from astra_sglang.profile import gpu_state


class FakeNvml:
    """A STAND-IN pynvml: an SM clock that drops from 1980 to 1600 MHz after a few samples, with a power cap."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    def __init__(self) -> None:
        self.reads = 0

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"gpu{i}"

    def nvmlDeviceGetName(self, h: str) -> bytes:
        return b"NVIDIA H200"

    def nvmlDeviceGetClockInfo(self, h: str, which: int) -> int:
        if which == self.NVML_CLOCK_MEM:
            return 3201
        self.reads += 1
        return 1980 if self.reads <= 3 else 1600

    def nvmlDeviceGetTemperature(self, h: str, which: int) -> int:
        return 50 + self.reads

    def nvmlDeviceGetPowerUsage(self, h: str) -> int:
        return 700_000

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: str) -> int:
        return 0x1 | (0x4 if self.reads > 3 else 0)


def test_a_process_that_was_capped_says_so():
    nvml = FakeNvml()
    s = gpu_state.Sampler(nvml, index=0, period_s=0.001).start()
    while nvml.reads < 8:
        time.sleep(0.005)
    state = s.stop()
    assert state is not None and state.gpu == "NVIDIA H200" and state.samples >= 8
    assert state.sm_mhz_median == 1600 and state.sm_mhz_min == 1600 and state.mem_mhz_median == 3201
    assert state.power_w_median == 700.0 and state.temp_c_max is not None and state.temp_c_max >= 58
    assert state.reasons == ["software power cap"]  # 'gpu idle' is left out: every forward has idle moments
    assert gpu_state.from_stdout("x\n" + gpu_state.line(state) + "\n") == state
    assert gpu_state.from_stdout("no line") is None and gpu_state.from_stdout(gpu_state.line(None)) is None


def test_without_nvml_nothing_is_sampled_or_claimed():
    class Broken:
        def nvmlInit(self) -> None:
            raise RuntimeError("NVML Shared Library Not Found")

    assert gpu_state.Sampler(Broken()).start().stop() is None


def test_rank_correlation():
    assert abs(gpu_state.spearman([1, 2, 3, 4], [40, 30, 20, 10]) + 1.0) < 1e-12  # type: ignore[operator]
    assert gpu_state.spearman([1, 2, 3], [5, 5, 5]) is None
    assert gpu_state.spearman([1, 2], [1, 2]) is None
    rho = gpu_state.spearman([1, 2, 2, 3], [1, 2, 3, 4])
    assert rho is not None and 0.9 < rho < 1.0  # ties take their average rank
