"""What one evaluation does: which shapes and dtypes, how it times, how long a candidate may take."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from astra_sglang.contract.base import Model

ShapeSet = Literal["paper", "decode", "prefill", "all", "test"]
DISTRIBUTIONS = ("normal", "wide", "tiny", "zeros", "special")


class ExtraCase(Model):
    """A case someone asked for (e.g. the loop's Testing agent): checked like the visible ones, fresh seed."""


    dims: dict[str, int]
    dtype: str
    distribution: str = "normal"


class EvalConfig(Model):

    shapes: ShapeSet = Field("paper", description="shapes timed (and always checked); 'test' = tiny CPU suite")
    dtypes: list[str] | None = Field(None, description="dtypes checked; None = every dtype the op supports")
    timing_dtypes: list[str] | None = Field(None, description="dtypes timed; None = bfloat16 (else the first)")
    distributions: list[str] | None = Field(None, description=f"subset of {DISTRIBUTIONS}; None = all that apply")
    findings_only: bool = Field(False, description="run only the distributions of the manifest's kernel findings "
                                "(validate-contract confirms them); otherwise they are left out")
    check_all_shapes: bool = Field(True, description="also check every other manifest shape (normal values), "
                                   "not only the timed ones; a candidate must be right wherever SGLang calls it")
    check_max_elems: int = Field(1 << 26, description="skip extra check shapes whose largest tensor is bigger")
    interpreter_max_elems: int = Field(1 << 22, description="under the Triton interpreter (shapes='test'), extra "
                                       "cases whose largest tensor is bigger are left to the GPU: a decode-attention "
                                       "case of 8M elements took minutes there and timed out an agent's check")
    dist_max_elems: int = Field(1 << 22, description="non-normal distributions only on shapes up to this size")
    extra_cases: list[ExtraCase] = Field(default_factory=list, description="additional visible cases")
    extra_timed_shapes: list[dict[str, int]] = Field(
        default_factory=list, description="shapes timed (and checked) besides the named set: `patches verify "
        "--record` adds twins of the named set at a short KV length (verify.across_unseen_dims), since a guard cannot "
        "see every size of a call (decode attention's KV length lives on the GPU) and must be derived across it")
    only_extra_timed: bool = Field(False, description="time only extra_timed_shapes (the named set's shapes are "
                                   "checked as the contract's other shapes are): `patches verify --record "
                                   "--twins-only` adds the short-context rows to records that already hold the named "
                                   "set's times")
    include_heldout: bool = Field(False, description="add held-out shapes/seeds derived from a private secret "
                                  "(final verdict only; never shown to agents)")
    heldout_shapes: int = 4
    seed: int | None = Field(None, description="base seed of the visible suite; None = fresh each evaluation")
    stateful_checks: int = Field(2, description="cases re-run at the same addresses with new values")
    screen: bool = Field(True, description="the static checks: the source screen before any build "
                         "(harness/screen.py) and the built module's imports (harness/module_imports.py); False only "
                         "for tests of the defences behind them, which must hold on their own")

    device: Literal["auto", "cuda", "cpu"] = "auto"
    arch: str = "sm_90a"
    gpu: str | None = Field(None, description="the GPU model the timing runs on ('NVIDIA H200'; the parent sets it "
                            "from the device): where a contract carries SGLang's served launch configs per GPU (fused "
                            "MoE), the named shape sets time this GPU's; None: the contract's first")
    cache_dir: Path | None = None
    build_workers: int = 8
    max_tune_configs: int = Field(64, ge=1, le=64, description="TUNE points one candidate may declare (a round of "
                                  "K candidates shares 64: optimize sets 64 // K)")
    timeout_s: float = Field(120.0, description="a worker silent for this long is killed (hang)")
    max_wall_s: float = Field(1800.0, description="hard cap on one candidate's worker")

    timing: bool = True
    max_timed_shapes: int | None = Field(None, description="time only the N largest of the selected shapes "
                                         "(all of them are still checked): a contract validation times one")
    mode: Literal["cold", "warm"] = "cold"
    protocol: Literal["default", "paper"] = Field("default", description="paper = 20 warm-up, 100 timed")
    warmup: int | None = None
    rep: int | None = None
    gpu_warmup_s: float = Field(2.0, description="busy work before timing: the H200 idles at 345 MHz")
    cold_l2_factor: float = Field(4.0, description="cold mode rotates input sets over more than this x L2")
    max_graph_launches: int = Field(1000, description="cap on launches per captured graph (tiny shapes)")
    warm_launches: int = Field(10, description="launches per graph replay in warm mode")
    min_change_pct: float = Field(1.0, description="speedups closer to 1 than max(spread, this) are 'no change'")
    suspect_margin: float = Field(0.04, description="above the copy ceiling by more than this = suspect")
    time_baselines: bool = Field(True, description="also time the manifest's CUDA baselines (e.g. FlashInfer)")
    simulate_timing: bool = Field(False, description="CPU only, for tests: run the timing code path with host "
                                  "timers (its numbers mean nothing)")
    copy_ceiling_gbps: float | None = Field(None, description="skip the measurement and use this value")

    def timing_protocol(self) -> tuple[int, int]:
        """(warm-up replays, timed replays) per implementation."""
        if self.protocol == "paper":
            return self.warmup or 20, self.rep or 100
        return self.warmup or 20, self.rep or 200
