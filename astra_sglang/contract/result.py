"""The harness's verdict on one candidate: what the agents read, what picks the winner, what patches cite.

Kept separate from the harness code so the agents loop and the patch registry can depend on the result
schema without importing torch.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from astra_sglang.contract.base import Model, drop_unset

# EvalResult.error of a judge that failed on its own side (an exception in the process that runs only SGLang's
# original and the reference): no verdict on the candidate
JUDGE_ERROR = "checker error"


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
    shape_set: str | None = Field(default=None, description="what was timed: the named set ('paper'), with N "
                                  "extra shapes ('paper + 13 extra'), or those alone ('13 extra only': `patches "
                                  "verify --twins-only`, whose geomean is no headline for the patch); None: the "
                                  "named set (written before this field)")

    @model_serializer(mode="wrap")
    def _without_unset_shape_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return drop_unset(handler(self), "shape_set")

    @property
    def extra_only(self) -> bool:
        return bool(self.shape_set and self.shape_set.endswith(" extra only"))


TuneValue = int | float | bool | str


class SweepShape(Model):
    """One config at one timed shape, timed ABBA against the original in the sweep's single worker."""

    dims: dict[str, int]
    dtype: str
    original_us: float
    candidate_us: float
    speedup: float
    spread_pct: float


class SweepConfig(Model):
    """One point of the space: dropped (``failure``) or timed on every timed shape (in a sweep of the original's
    configs: on every timed shape it could launch at, ``refused`` naming the others)."""

    config: dict[str, TuneValue]
    ok: bool
    failure: str | None = Field(default=None, description="why it was dropped: the screen, the quick check, "
                                "a launch error, the after-timing check")
    shapes: list[SweepShape] = Field(default_factory=list)
    refused: list[str] = Field(default_factory=list, description="a sweep of the original's configs: where the GPU "
                               "refused to launch it (shared memory, registers); it competes only at the shapes "
                               "it was timed on, and a retune never serves it")


class SweepChoice(Model):
    """The config chosen for one shape bucket (a timed shape; calls pick the nearest bucket by dims)."""

    dims: dict[str, int]
    config: dict[str, TuneValue]
    original_us: float = Field(description="geometric mean over the timed dtypes")
    candidate_us: float
    speedup: float


class SweepReport(Model):
    """What a sweep measured and what it froze (docs/harness.md, "Tunable candidates")."""

    parameters: dict[str, list[TuneValue]]
    configs: list[SweepConfig]
    choice: list[SweepChoice]
    single: bool = Field(description="one config is within noise of the best on every shape: no dispatch by shape")
    quick_cases: int = Field(0, description="cases of the quick check every config ran before timing")
    method: str = ""
    note: str = Field("", description="e.g. CPU: host timers, the choice is arbitrary among correct configs")
    frozen_path: str | None = Field(default=None, description="the frozen source (no TUNE, a TUNED table): what "
                                    "was fully evaluated and what is shipped")
    frozen_sha256: str | None = None
    frozen_source: str | None = None
    wall_s: float = 0.0


class BaselineShape(Model):
    dims: dict[str, int]
    dtype: str
    original_us: float
    best_config: dict[str, TuneValue]
    best_us: float
    speedup: float


class SweepBaseline(Model):
    """``astra-sglang tune OP``: the original's own launch parameters swept; the bar a candidate must beat."""

    schema_version: int = 1
    op_id: str
    sglang_version: str
    device: str
    parameters: dict[str, list[TuneValue]] = Field(description="what was swept, e.g. 'merge_state_kernel.num_warps'")
    original_config: dict[str, str] = Field(description="the original's own value of each parameter (source text)")
    shapes: list[BaselineShape]
    configs: list[SweepConfig]
    method: str = ""
    note: str = ""
    wall_s: float = 0.0
    configs_from: str = Field(default="", description="'' = every config of the space; else which configs were "
                              "swept and the prior sweep they were chosen from (`tune --prior`): such a sweep can "
                              "register a retune, it is never a run's bar")

    @property
    def geomean_speedup(self) -> float | None:
        s = [x.speedup for x in self.shapes if x.speedup > 0]
        return math.exp(sum(math.log(v) for v in s) / len(s)) if s else None


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
    sweep: SweepReport | None = Field(default=None, description="a tunable candidate (TUNE): its sweep and the "
                                      "frozen source the rest of this result evaluated")
    sandbox: str | None = Field(default=None, description="the OS sandbox the candidate's worker ran in, as its "
                                "trusted code reported it before the candidate was imported: 'landlock+seccomp', "
                                "'seccomp+mounts: <why>' (a GPU), 'seccomp only: <why>', 'none: <why>' "
                                "(docs/harness.md); None: no worker ran")

    @property
    def ok(self) -> bool:
        return self.build.ok and self.correctness is not None and self.correctness.ok and self.error is None

    @property
    def judge_error(self) -> bool:
        """The judge failed on its own side: not a verdict on the candidate (its worker's crashes and hangs are)."""
        return bool(self.error and self.error.startswith(f"{JUDGE_ERROR}:"))

    @property
    def geomean_speedup(self) -> float | None:
        return self.timing.geomean_speedup if self.timing else None
