"""Host stand-in for ``timing`` so the whole timing path (capture, interleaving, after-timing re-checks, reports)
runs in CPU tests. Its numbers mean nothing; enabled only by ``EvalConfig.simulate_timing`` on CPU."""

from __future__ import annotations

import time
from typing import Any, Callable

from astra_sglang.harness.timing import Samples, rotation_sets, verdict  # noqa: F401 - same API as timing

Launch = Callable[[], Any]


def capture(launch: Launch, eager_first: bool = True) -> Launch:
    if eager_first:
        launch()
    return launch


def _replay(g: Launch) -> None:
    g()


def time_graphs(graphs: list[Launch], launches_per_replay: int, warmup: int, rep: int) -> list[Samples]:
    for _ in range(warmup):
        for g in graphs:
            g()
    out: list[list[float]] = [[] for _ in graphs]
    for i in range(rep):
        order = range(len(graphs)) if i % 2 == 0 else range(len(graphs) - 1, -1, -1)
        for j in order:
            t0 = time.perf_counter()
            graphs[j]()
            out[j].append((time.perf_counter() - t0) * 1e6 / launches_per_replay)
    return [Samples(x) for x in out]


def time_eager(launches: list[Launch], warmup: int, rep: int) -> list[Samples]:
    return time_graphs(launches, 1, warmup, rep)


def warm_gpu(seconds: float) -> None:
    return None


def copy_ceiling_gbps(nbytes: int = 0, rep: int = 0) -> float:
    return 1.0  # host "ceiling": everything is far below or above it; meaningless by design


def l2_bytes() -> int:
    return 4096


def device_name() -> str:
    return "cpu (simulated timing, TRITON_INTERPRET=1)"
