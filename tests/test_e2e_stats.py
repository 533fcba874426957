"""e2e's statistics on synthetic per-process samples whose answer is known."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")

from astra_sglang.e2e.stats import (  # noqa: E402
    Interval,
    chance_separation,
    judge,
    overall,
    ratio_interval,
    rounds_needed,
    summarize,
)


def _procs(center: float, n: int, noise: float, seed: int) -> list[float]:
    """n processes' decode step medians: ``center`` times a process-level factor (the H200's 3-6%)."""
    rng = np.random.default_rng(seed)
    return list(center * np.exp(rng.normal(0.0, noise, n)))


def test_ten_percent_faster_with_three_percent_process_noise_excludes_one():
    a, b = _procs(14e-3, 6, 0.03, 1), _procs(0.9 * 14e-3, 6, 0.03, 2)
    iv = ratio_interval(b, a, seed=0)
    assert iv is not None and iv.high < 1.0
    assert iv.low < 0.9 < iv.high                          # the true ratio is inside
    assert iv.ratio == pytest.approx(float(np.median(b) / np.median(a)))


def test_identical_arms_hold_one():
    a, c = _procs(14e-3, 6, 0.03, 3), _procs(14e-3, 6, 0.03, 4)
    iv = ratio_interval(c, a, seed=0)
    assert iv is not None and iv.holds_one


def test_the_h200s_measured_spread_cannot_resolve_a_two_percent_gain_from_one_pair_per_round():
    a = [13.57, 13.94, 14.45, 14.08]                       # bs 128, four processes, identical kernels
    b = [x * 0.98 for x in (14.08, 13.57, 14.45, 13.94)]
    iv = ratio_interval(b, a, seed=0)
    assert iv is not None and iv.holds_one
    assert judge(iv, iv)[0] == "no measurable change"


def test_seeded_and_resampling_processes():
    a, b = _procs(1.0, 5, 0.05, 5), _procs(1.0, 7, 0.05, 6)
    assert ratio_interval(b, a, seed=3) == ratio_interval(b, a, seed=3)
    iv = ratio_interval(b, a, seed=3)
    assert iv is not None and (iv.n_num, iv.n_den) == (7, 5)
    assert ratio_interval([1.0], a) is None               # one process says nothing about the spread


def test_a_wider_spread_gives_a_wider_interval_and_more_rounds_needed():
    narrow = ratio_interval(_procs(1.0, 6, 0.01, 7), _procs(1.0, 6, 0.01, 8), seed=0)
    wide = ratio_interval(_procs(1.0, 6, 0.06, 7), _procs(1.0, 6, 0.06, 8), seed=0)
    assert narrow is not None and wide is not None and wide.half_width > 3 * narrow.half_width
    assert rounds_needed(6, 0.03, 0.01) == 54              # 1/sqrt(n): three times narrower, nine times the rounds
    assert rounds_needed(6, 0.005, 0.01) == 6              # already narrow enough


def _iv(lo: float, hi: float) -> Interval:
    return Interval(ratio=(lo + hi) / 2, low=lo, high=hi, n_num=6, n_den=6)


def test_verdict_rule():
    faster, same, slower = _iv(0.88, 0.94), _iv(0.97, 1.03), _iv(1.02, 1.08)
    v, why = judge(faster, same)
    assert v == "gain" and "placebo holds" in why[-1]
    v, why = judge(faster, _iv(0.90, 0.96))                # the placebo moved as much: not the kernels
    assert v == "no measurable change" and "placebo moved" in " ".join(why)
    v, why = judge(faster, same, ["patch p served no calls in round 2's B process"])
    assert v == "no measurable change" and why[-1].startswith("patch p served no calls")
    v, why = judge(same, same)
    assert v == "no measurable change" and "holds 1" in why[0]
    v, why = judge(slower, same)
    assert v == "slower" and "slower" in why[0]
    assert judge(faster, None)[0] == "no measurable change"
    assert judge(None, same) == ("no measurable change", ["fewer than 2 processes in arm A or B: no interval"])


def test_summary_and_overall():
    samples = {"A": _procs(10e-3, 6, 0.03, 9), "B": _procs(9e-3, 6, 0.03, 10), "C": _procs(10e-3, 6, 0.03, 11)}
    m = summarize("decode step median", samples, target_halfwidth=0.01)
    assert m.verdict == "gain"
    assert m.medians["A"] == pytest.approx(float(np.median(samples["A"])))
    assert m.rounds_needed is not None and m.rounds_needed > 6
    assert overall(["gain", "no measurable change"]) == "gain"
    assert overall(["gain", "slower"]) == "slower"
    assert overall(["no measurable change"]) == "no measurable change"


def test_two_processes_per_arm_never_give_a_verdict_that_identical_arms_would_give_by_chance():
    """The H200 (2026-12-04): 2+2 processes whose patch served no call read "slower", B/A 1.040 [1.002, 1.097]."""
    a, b = [6.70e-3, 7.02e-3], [7.10e-3, 7.17e-3]          # every B above every A: 1 time in 6 for identical arms
    iv = ratio_interval(b, a, seed=0)
    assert iv is not None and iv.low > 1.0                  # the bootstrap alone would call it slower
    v, why = judge(iv, ratio_interval(a, b, seed=1))
    assert v == "no measurable change" and "by chance 33%" in why[0] and "4 processes per arm" in why[0]
    assert judge(_iv(0.88, 0.94).model_copy(update={"n_num": 3, "n_den": 3}), _iv(0.97, 1.03))[0] == (
        "no measurable change")                             # 3 + 3: 10% by chance, still too few at 95%
    assert chance_separation(4, 4) < 0.05 < chance_separation(3, 3)


def test_a_placebo_from_too_few_arm_runs_is_named_so_not_blamed_on_the_hooks():
    """H100, 2026-12-07: a cut in-process run had 3 C and 4 A arm-runs at batch 128; its C/A [0.946, 0.990] read as
    "the hooks account for the change". From arms that small no interval means that: more rounds, no gain."""
    faster = _iv(0.84, 0.89)
    placebo = _iv(0.946, 0.990).model_copy(update={"n_num": 3, "n_den": 4})
    v, why = judge(faster, placebo, unit="arm-runs")
    assert v == "no measurable change"
    assert "from 3 and 4 arm-runs, too few" in why[-1] and "hooks" not in " ".join(why)
    v, why = judge(faster, _iv(0.90, 0.96), unit="arm-runs")  # enough arm-runs: the placebo did move
    assert v == "no measurable change" and "placebo moved" in " ".join(why)


def test_identical_arms_rarely_read_as_a_change_at_any_number_of_rounds():
    """Simulated null: A and B the same kernels, 3% process noise; a verdict other than "no measurable change"
    must come at most about as often as the 95% level allows, at 2, 3, 4 and 6 processes per arm."""
    for n in (2, 3, 4, 6):
        wrong = 0
        for trial in range(200):
            a, b = _procs(1.0, n, 0.03, 1000 + 2 * trial), _procs(1.0, n, 0.03, 1001 + 2 * trial)
            iv = ratio_interval(b, a, seed=trial, resamples=2000)
            assert iv is not None
            wrong += judge(iv, _iv(0.97, 1.03))[0] != "no measurable change"
        assert wrong <= 0.08 * 200, (n, wrong)
