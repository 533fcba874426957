"""The one timing module on CPU: its statistics, its interleaving, the wall-clock rule and the tripwire."""

from __future__ import annotations

import time

import torch

from astra_sglang.harness.shared import timing


def test_samples_give_median_and_iqr_spread():
    s = timing.Samples([10.0, 11.0, 9.0, 10.0, 30.0, 10.0, 10.0, 10.0])
    assert s.median == 10.0
    assert 0.0 < s.spread_pct < 20.0  # one outlier moves neither
    assert timing.Samples([5.0, 6.0]).spread_pct == 0.0


def test_abba_reverses_the_order_every_other_round():
    assert [list(timing.abba(i, 3)) for i in range(3)] == [[0, 1, 2], [2, 1, 0], [0, 1, 2]]


def test_wall_rule_flags_times_far_below_the_wall_clock_only():
    assert timing.wall_suspect(reported_us=25_000, wall_us=100_000, replays=50, latency_us=500, ratio=0.6)
    assert timing.wall_suspect(reported_us=95_000, wall_us=100_000, replays=50, latency_us=500, ratio=0.6) is None
    # a batch shorter than its allowances proves nothing either way
    assert timing.wall_suspect(reported_us=1, wall_us=400, replays=50, latency_us=500, ratio=0.6) is None


def test_tripwire_names_a_rebound_clock_and_a_changed_function(monkeypatch):
    assert timing.tampered() == []
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    monkeypatch.setattr(torch.cuda.Event, "elapsed_time", lambda self, end: 0.0)
    monkeypatch.setattr(timing.HostClock, "time_replays", lambda self, g, n, p: [1.0] * n)
    bad = timing.tampered()
    assert {"time.perf_counter", "torch.cuda.Event.elapsed_time",
            "astra_sglang.harness.shared.timing.HostClock.time_replays"} <= set(bad)
    monkeypatch.undo()
    assert timing.tampered() == []


def test_time_interleaved_tells_a_slow_launch_from_a_fast_one():
    def fast() -> None:
        time.sleep(0.0005)

    def slow() -> None:
        time.sleep(0.004)

    (a, b), method = timing.time_interleaved(timing.HostClock(), [fast, slow], warmup=1, rep=6)
    assert method.startswith("host-timed") and len(a.us) == len(b.us) == 6
    assert b.median > 2 * a.median
    assert timing.rotation_sets(1 << 20, 50 << 20, 4.0, 1000, cold=True) == 201
    assert timing.rotation_sets(1 << 20, 50 << 20, 4.0, 1000, cold=False) == 1


def test_patches_verify_times_the_original_and_the_patch_side_by_side_with_the_one_timer():
    """devcheck had a timer of its own (each side timed alone); it now uses time_interleaved, per call."""
    from astra_sglang.patches.tooling.devcheck import time_pair

    calls = {"original": 0, "patch": 0}

    def original() -> None:
        calls["original"] += 1
        time.sleep(0.002)

    def patch() -> None:
        calls["patch"] += 1
        time.sleep(0.0004)

    orig_us, patch_us = time_pair(original, patch, reps=60, clock=timing.HostClock(), per_replay=2)
    assert 1800 < orig_us < 8000 and patch_us < orig_us / 2      # us per call, not per replay of 2 calls
    assert calls["original"] == calls["patch"] == 2 * (1 + 5 + 6)  # capture, warm-up, 6 timed replays each
