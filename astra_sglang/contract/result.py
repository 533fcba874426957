"""The harness's verdict on one candidate: what the agents read, what picks the winner, what patches cite.

Kept separate from the harness code so the agents loop and the patch registry can depend on the result
schema without importing torch.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from astra_sglang.contract.base import Model


class KernelResources(Model):
    """One kernel's line of the ``-Xptxas -v`` report (Triton: from the compiled kernel's metadata)."""

    kernel: str
    registers: int | None = None
    spill_stores_bytes: int | None = None
    spill_loads_bytes: int | None = None
    smem_bytes: int | None = None
    stack_frame_bytes: int | None = None


class BuildReport(Model):
    ok: bool
    seconds: float = 0.0
    log: str = Field(default="", description="compiler output, trimmed; the error message on failure")
    resources: list[KernelResources] = Field(default_factory=list)
    cached: bool = False


class FailedCase(Model):
    """The first check that failed, with everything needed to reproduce it."""

    reason: str = Field(description="e.g. 'mismatch', 'nan', 'unwritten output', 'input mutated', 'timeout', "
                        "'crash', 'stateful', 'launch error', "
                        "'out-of-bounds write', 'timed run wrong', 'reference mismatch'")
    detail: str = ""
    dims: dict[str, int] = Field(default_factory=dict)
    dtype: str | None = None
    distribution: str | None = None
    seed: int | None = None
    tensor: str | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    heldout: bool = False


class CorrectnessReport(Model):
    ok: bool
    cases_run: int = 0
    heldout_cases_run: int = 0
    first_failure: FailedCase | None = None
    skipped_cases: int = Field(default=0, description="cases the original itself refuses (not counted as run)")
    reference_error: dict[str, tuple[float, float]] = Field(
        default_factory=dict,
        description="original-only runs: per output, (max |original - reference|, max share of the tolerance "
        "used) over every case run; the numbers a contract validation records",
    )
    notes: list[str] = Field(default_factory=list)


class ShapeTiming(Model):
    dims: dict[str, int]
    dtype: str
    original_us: float = Field(description="the extracted original's time; where it refuses the shape "
                               "(original_refused), the time of the kernel SGLang serves there, the one comparison")
    candidate_us: float | None = None
    spread_pct: float = Field(description="relative spread (IQR/median, max of both sides) of the timed samples")
    speedup: float | None = None
    verdict: Literal["faster", "slower", "no change", "suspect", "original only"] = "original only"
    bytes_moved: int
    original_gbps: float
    candidate_gbps: float | None = None
    original_pct_ceiling: float
    candidate_pct_ceiling: float | None = None
    rotation_bytes: int | None = Field(default=None, description="bytes one replay touches per side (cold "
                                          "mode: > 4x L2 unless capped for tiny shapes)")
    samples: int | None = Field(default=None, description="timed replays per side")
    baseline_name: str | None = Field(default=None, description="the library kernel SGLang serves with here")
    baseline_us: float | None = Field(default=None, description="its time, interleaved with the others")
    original_refused: bool = Field(default=False, description="the extracted original refuses this shape: "
                                   "checked and timed against the kernel SGLang serves here instead")
    served_by: str | None = Field(default=None, description="what SGLang serves this shape with: 'original' or "
                                  "a baseline's name; None where the op manifest does not say")
    served_us: float | None = Field(default=None, description="that kernel's time here")
    served_speedup: float | None = Field(default=None, description="served_us / candidate_us: the speedup a user "
                                         "of SGLang would see on this shape")


class TimingReport(Model):
    mode: Literal["cold", "warm"] = "cold"
    method: str = Field(description="e.g. 'cuda-graph replay, 20 warm-up, 100 timed, ABAB interleaved'")
    copy_ceiling_gbps: float
    shapes: list[ShapeTiming]
    geomean_speedup: float | None = Field(default=None, description="the headline: over shapes, of served_speedup "
                                          "where the op states what SGLang serves, else of speedup (vs original)")
    geomean_vs_original: float | None = Field(default=None, description="of speedup over the shapes the original "
                                              "runs (where the headline is vs served)")
    suspect: list[str] = Field(default_factory=list, description="why a number is not trusted (above ceiling...)")


class EvalResult(Model):
    """Everything known about one candidate (or the original alone when ``candidate`` is None)."""

    op_id: str
    candidate: str | None = Field(default=None, description="path of the candidate source, None = original")
    candidate_sha256: str | None = None
    device: str = Field(description="'NVIDIA H200 (sm_90)' or 'cpu (TRITON_INTERPRET=1)'")
    sglang_version: str
    build: BuildReport
    correctness: CorrectnessReport | None = None
    timing: TimingReport | None = None
    error: str | None = Field(default=None, description="why evaluation stopped (build failed, worker died, ...)")
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.build.ok and self.correctness is not None and self.correctness.ok and self.error is None

    @property
    def geomean_speedup(self) -> float | None:
        return self.timing.geomean_speedup if self.timing else None
