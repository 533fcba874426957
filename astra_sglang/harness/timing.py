"""GPU timing: CUDA-graph replay, ABAB interleaving, cold-L2 rotation, and the copy ceiling.

Runs only inside a worker on CUDA. The timer primitives are bound when this module is imported, which the
worker does before it imports any candidate, so a candidate that patches ``torch.cuda.Event`` or
``CUDAGraph.replay`` afterwards does not change what is measured. Replaying a captured graph runs only what was
captured: work a candidate forks onto side streams is joined into the graph (and counted), work it hides
elsewhere is not replayed at all and shows up in the after-timing re-check as missing output.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
import triton
import triton.language as tl

_Event = torch.cuda.Event
_elapsed = torch.cuda.Event.elapsed_time
_record = torch.cuda.Event.record
_replay = torch.cuda.CUDAGraph.replay
_sync = torch.cuda.synchronize
_Graph = torch.cuda.CUDAGraph
_graph_ctx = torch.cuda.graph

Launch = Callable[[], Any]


@triton.jit
def _copy16_kernel(src, dst, BLOCK: tl.constexpr):
    # int32 x BLOCK per program with BLOCK = 4 * 32 * num_warps * k: each thread moves k 16-byte vectors
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs))


def capture(launch: Launch, eager_first: bool = True) -> Any:
    """Capture one call of ``launch`` (which may launch many kernels) into a CUDA graph."""
    if eager_first:  # compile / load / lazy init outside the capture
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            launch()
        torch.cuda.current_stream().wait_stream(s)
        _sync()
    g = _Graph()
    with _graph_ctx(g):
        launch()
    _sync()
    return g


@dataclass
class Samples:
    us: list[float]  # per launch

    @property
    def median(self) -> float:
        return statistics.median(self.us)

    @property
    def spread_pct(self) -> float:
        """IQR / median, in percent."""
        if len(self.us) < 4:
            return 0.0
        q = statistics.quantiles(self.us, n=4)
        return 100.0 * (q[2] - q[0]) / self.median


def time_graphs(graphs: list[Any], launches_per_replay: int, warmup: int, rep: int) -> list[Samples]:
    """Replay the graphs interleaved (A B, then B A, ...) so clock and thermal drift hit all of them alike."""
    n = len(graphs)
    for _ in range(warmup):
        for g in graphs:
            _replay(g)
    _sync()
    starts = [[_Event(enable_timing=True) for _ in range(rep)] for _ in range(n)]
    ends = [[_Event(enable_timing=True) for _ in range(rep)] for _ in range(n)]
    for i in range(rep):
        order = range(n) if i % 2 == 0 else range(n - 1, -1, -1)
        for j in order:
            _record(starts[j][i])
            _replay(graphs[j])
            _record(ends[j][i])
    _sync()
    return [Samples([_elapsed(starts[j][i], ends[j][i]) * 1000.0 / launches_per_replay for i in range(rep)])
            for j in range(n)]


def time_eager(launches: list[Launch], warmup: int, rep: int) -> list[Samples]:
    """Fallback when the original cannot be captured: all streams synchronised before each end event."""
    for _ in range(warmup):
        for f in launches:
            f()
    _sync()
    out: list[list[float]] = [[] for _ in launches]
    for i in range(rep):
        order = range(len(launches)) if i % 2 == 0 else range(len(launches) - 1, -1, -1)
        for j in order:
            s, e = _Event(enable_timing=True), _Event(enable_timing=True)
            _record(s)
            launches[j]()
            _sync()
            _record(e)
            e.synchronize()
            out[j].append(_elapsed(s, e) * 1000.0)
    return [Samples(x) for x in out]


def warm_gpu(seconds: float) -> None:
    """The H200 idles at 345 MHz; keep it busy until clocks are up."""
    if seconds <= 0:
        return
    n = 1 << 26
    src = torch.empty(n, dtype=torch.int32, device="cuda")
    dst = torch.empty_like(src)
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        for _ in range(20):
            _copy16_kernel[(n // 2048,)](src, dst, BLOCK=2048, num_warps=4)
        _sync()


def copy_ceiling_gbps(nbytes: int = 1 << 30, rep: int = 30) -> float:
    """Device copy bandwidth (bytes read + written) of our 16 B/thread copy kernel, CUDA-graph timed, best config.

    Not ``Tensor.copy_``: captured in a graph it becomes a copy-engine memcpy node (2762 vs 4279 GB/s on H200).
    """
    n = nbytes // 4
    src = torch.ones(n, dtype=torch.int32, device="cuda")
    dst = torch.empty_like(src)
    best = 0.0
    for block, warps in ((512, 4), (2048, 4), (4096, 8)):
        if n % block:
            continue
        g = capture(lambda: _copy16_kernel[(n // block,)](src, dst, BLOCK=block, num_warps=warps))
        (s,) = time_graphs([g], 1, 5, rep)
        best = max(best, 2 * nbytes / (s.median * 1e-6) / 1e9)
        del g
    if not bool(torch.equal(src[:1024], dst[:1024])):
        raise RuntimeError("copy-ceiling kernel produced wrong data")
    del src, dst
    torch.cuda.empty_cache()
    return best


def l2_bytes() -> int:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)


def rotation_sets(bytes_moved: int, l2: int, factor: float, max_sets: int, cold: bool) -> int:
    """How many argument sets one replay cycles through so that, in cold mode, it touches > factor x L2."""
    if not cold:
        return 1
    return max(2, min(max_sets, math.ceil(factor * l2 / max(bytes_moved, 1)) + 1))


def device_name() -> str:
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    return f"{p.name} (sm_{p.major}{p.minor})"


def verdict(speedup: Optional[float], spread_pct: float, suspect: bool) -> str:
    if speedup is None:
        return "original only"
    if suspect:
        return "suspect"
    if abs(speedup - 1.0) * 100.0 <= spread_pct:
        return "no change"
    return "faster" if speedup > 1.0 else "slower"
