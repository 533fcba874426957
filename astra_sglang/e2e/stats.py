"""The statistics of ``e2e``: per-arm medians, B/A and C/A with bootstrap intervals, the verdict, rounds needed.

The unit of every sample here is one **process**: one fresh ``one_batch`` run gives one decode-step median and
one prefill latency per batch size. Process-to-process variation is the dominant noise (on the H200, processes
running identical kernels differ by 3-6% in decode step median: 13.57 / 13.94 / 14.45 / 14.08 ms at bs 128),
far above the step-to-step noise inside one process, so resampling steps would give intervals that look narrow
and mean nothing. The interval is a seeded percentile bootstrap that resamples processes, each arm's with
replacement, and takes the ratio of the arms' medians; medians rather than means because one process on a
slow clock must not decide the verdict (simulated at 3% process noise and 6 processes per arm, this interval
excludes a true ratio of 1 in about 3% of runs; the mean's in about 11%).

Ratios are of latencies: below 1 is faster.

With few processes the percentile bootstrap over-claims: with 2 per arm its interval excludes 1 whenever every B
process is slower than every A process, which identical arms do by chance 1 time in 6 in each direction (the H200,
2026-12-04: B/A 1.040 [1.002, 1.097] "slower" from 2+2 processes whose patch had served no call). So no verdict
other than "no measurable change" is given unless the arms' sizes allow it at all: the chance that identical arms
separate completely, 2 / C(n_a + n_b, n_a), must be below 1 - level (4 processes per arm at 95%).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from astra_sglang.contract.base import Model

Verdict = Literal["gain", "no measurable change", "slower"]
GAIN: Verdict = "gain"
SAME: Verdict = "no measurable change"
SLOWER: Verdict = "slower"

RESAMPLES = 10_000
LEVEL = 0.95


class Interval(Model):
    """A ratio of two arms' medians (numerator over denominator) and its bootstrap interval."""

    ratio: float
    low: float
    high: float
    level: float = LEVEL
    n_num: int = Field(description="processes in the numerator's arm")
    n_den: int = Field(description="processes in the denominator's arm")

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    @property
    def holds_one(self) -> bool:
        return self.low <= 1.0 <= self.high

    def text(self) -> str:
        return f"{self.ratio:.3f} [{self.low:.3f}, {self.high:.3f}]"


class MetricSummary(Model):
    """One metric (decode step median, or prefill latency) of one batch shape, over all the processes."""

    metric: str
    samples: dict[str, list[float]] = Field(description="arm -> one value per process, seconds")
    medians: dict[str, float] = Field(description="arm -> median over its processes, seconds")
    b_over_a: Interval | None = None
    c_over_a: Interval | None = None
    verdict: Verdict = SAME
    reasons: list[str] = Field(default_factory=list, description="why the verdict is what it is, plainly")
    rounds_needed: int | None = Field(default=None, description="processes per arm for the B/A half-width target")


def median(values: Sequence[float]) -> float:
    import numpy as np

    return float(np.median(np.asarray(values, dtype=float)))


def ratio_interval(num: Sequence[float], den: Sequence[float], *, seed: int = 0, resamples: int = RESAMPLES,
                   level: float = LEVEL) -> Interval | None:
    """median(num) / median(den) with a percentile bootstrap interval over processes; None below 2 per arm
    (one process says nothing about how much processes differ)."""
    import numpy as np

    a = np.asarray(den, dtype=float)
    b = np.asarray(num, dtype=float)
    if len(a) < 2 or len(b) < 2:
        return None
    rng = np.random.default_rng(seed)
    ra = np.median(a[rng.integers(0, len(a), (resamples, len(a)))], axis=1)
    rb = np.median(b[rng.integers(0, len(b), (resamples, len(b)))], axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(rb / ra, [tail, 100 - tail])
    return Interval(ratio=float(np.median(b) / np.median(a)), low=float(low), high=float(high), level=level,
                    n_num=len(b), n_den=len(a))


def chance_separation(n_num: int, n_den: int) -> float:
    """How often two arms of identical processes come out with every process of one above every process of the
    other (either way): the smallest two-sided p-value a rank test can give at these sizes."""
    return min(1.0, 2 / math.comb(n_num + n_den, n_den))


def fewest_processes(level: float = LEVEL) -> int:
    """Processes per arm below which no verdict but "no measurable change" can come (4 at 95%)."""
    n = 2
    while chance_separation(n, n) > 1 - level:
        n += 1
    return n


def too_few(iv: Interval, unit: str = "processes") -> str | None:
    """Why ``iv`` cannot decide anything at its arms' sizes, or None when it can. ``unit``: what one sample is
    (an in-process run's samples are arm-runs inside one process, and the same rank argument holds for them)."""
    p = chance_separation(iv.n_num, iv.n_den)
    if p <= 1 - iv.level:
        return None
    return (f"B/A {iv.text()} from {iv.n_num} and {iv.n_den} {unit}: identical arms this small separate "
            f"completely by chance {p:.0%} of the time, so no interval from them can exclude 1 at "
            f"{iv.level:.0%}; more rounds ({fewest_processes(iv.level)} {unit} per arm at least)")


def rounds_needed(rounds: int, half_width: float, target: float) -> int:
    """Processes per arm for a half-width of ``target``, from ``rounds`` that gave ``half_width``: a bootstrap
    interval narrows as 1/sqrt(n), so n grows with the square of the ratio. An estimate, not a promise."""
    if half_width <= target or rounds <= 0:
        return rounds
    return math.ceil(rounds * (half_width / target) ** 2)


def placebo_moved(b_over_a: Interval, c_over_a: Interval) -> str:
    """Why a placebo interval that excludes 1 matters, by direction. C runs B's hooks (installed, reached, guards
    evaluated) with SGLang's own kernels serving: when C moves the way B does, what B and C share, the hooks,
    accounts for the change, not the patch's kernel. When C moves the other way, the processes differ by more
    than the patches do. ``b_over_a`` is taken to exclude 1 (a gain or a slowdown to explain)."""
    b_up, c_up = b_over_a.low > 1.0, c_over_a.low > 1.0
    where = "above" if c_up else "below"
    if b_up == c_up:
        return (f"the placebo moved the same way (C/A {c_over_a.text()} lies {where} 1, as B/A does): C runs the "
                "same hooks with SGLang's own kernels, so the hooks (installed in both B and C), not the patch's "
                "kernel, account for the change")
    return (f"the placebo moved the other way (C/A {c_over_a.text()} lies {where} 1): the processes differ by more "
            "than the patches do; more rounds")


def judge(b_over_a: Interval | None, c_over_a: Interval | None, problems: Sequence[str] = (),
          unit: str = "processes") -> tuple[Verdict, list[str]]:
    """A gain only when all three hold: B/A's interval lies below 1, C/A's (the placebo's) holds 1, and nothing in
    ``problems`` (a reached patch that served no calls, a placebo whose hooks were never reached). "slower" when
    B/A's interval lies above 1, whatever else: the patches as installed slow the forward, even when the placebo's
    moving the same way says the hooks, not the kernel, do it. Otherwise no measurable change. Each reason says
    which part failed, in ``unit`` (what one sample is: a process, or an arm-run of an in-process run)."""
    if b_over_a is None:
        return SAME, [f"fewer than 2 {unit} in arm A or B: no interval"]
    reasons: list[str] = []
    few = too_few(b_over_a, unit)
    if few is not None and not b_over_a.holds_one:
        return SAME, [few, *problems]
    if b_over_a.low > 1.0:
        reasons.append(f"B/A {b_over_a.text()} lies above 1: with the patches the forward is slower")
        if c_over_a is not None and not c_over_a.holds_one:
            reasons.append(placebo_moved(b_over_a, c_over_a))
        return SLOWER, reasons + list(problems)
    if b_over_a.holds_one:
        noise = "process-to-process noise" if unit == "processes" else f"the noise between {unit}"
        reasons.append(f"B/A {b_over_a.text()} holds 1: any difference is within {noise}")
        return SAME, reasons + list(problems)
    reasons.append(f"B/A {b_over_a.text()} lies below 1")
    ok = True
    if c_over_a is None:
        reasons.append(f"no placebo interval (fewer than 2 {unit} in arm C): a gain cannot be told from drift")
        ok = False
    elif not c_over_a.holds_one and too_few(c_over_a, unit) is not None:
        # an interval from arms this small excludes 1 by chance as often as not: it says nothing about the hooks
        # (H100, 2026-12-07: a cut run's 3 C and 4 A arm-runs gave C/A [0.946, 0.990], read as "the hooks account
        # for the change"; the full run's 6 and 6 gave C/A 0.999 [0.967, 1.031])
        reasons.append(f"but the placebo's C/A {c_over_a.text()} comes from {c_over_a.n_num} and {c_over_a.n_den} "
                       f"{unit}, too few to tell a gain from drift; more rounds ({fewest_processes(c_over_a.level)} "
                       f"{unit} per arm at least)")
        ok = False
    elif not c_over_a.holds_one:
        reasons.append(f"but {placebo_moved(b_over_a, c_over_a)}")
        ok = False
    else:
        reasons.append(f"the placebo holds (C/A {c_over_a.text()})")
    if problems:
        reasons.extend(problems)
        ok = False
    return (GAIN if ok else SAME), reasons


def summarize(metric: str, samples: dict[str, list[float]], problems: Sequence[str] = (), *,
              target_halfwidth: float = 0.01, seed: int = 0, unit: str = "processes") -> MetricSummary:
    """One metric's medians, ratios, verdict and rounds-needed estimate, from per-process (or, ``unit``
    "arm-runs", per-arm-run) samples per arm."""
    a, b, c = samples.get("A", []), samples.get("B", []), samples.get("C", [])
    ba = ratio_interval(b, a, seed=seed)
    ca = ratio_interval(c, a, seed=seed + 1)
    verdict, reasons = judge(ba, ca, problems, unit)
    need = rounds_needed(min(len(a), len(b)), ba.half_width, target_halfwidth) if ba is not None else None
    return MetricSummary(metric=metric, samples={k: list(v) for k, v in samples.items()},
                         medians={k: median(v) for k, v in samples.items() if v}, b_over_a=ba, c_over_a=ca,
                         verdict=verdict, reasons=reasons, rounds_needed=need)


def overall(verdicts: Sequence[Verdict]) -> Verdict:
    """The run's one word: slower if any shape is, a gain if some shape is and none is slower, else no change."""
    if SLOWER in verdicts:
        return SLOWER
    return GAIN if GAIN in verdicts else SAME
