"""The one timing module: statistics, ABBA interleaving, cold-L2 rotation, the copy ceiling, and two clocks.

``CudaClock`` times CUDA-graph replays with CUDA events; ``HostClock`` stands in for it on CPU (host timers,
the "graph" is the call itself) so every timing code path runs in CPU tests; its numbers mean nothing.
Both give the same statistics (``Samples``: medians, IQR spread) and the same interleaving (``abba``).

For other tools (devcheck, scripts): ``time_interleaved(clock_for("cuda"), [launch_a, launch_b], warmup, rep)``
captures each launch function into a CUDA graph (eagerly if capture fails) and replays them ABBA-interleaved;
``rotation_sets`` says how many argument sets one replay should cycle through to keep L2 cold.

The primitives every clock uses are bound here, at import, which the candidate worker does before it imports
any candidate; ``tampered()`` names any that were rebound since (or whose code changed). That is a tripwire
inside the candidate's own process: the checker does not trust it alone, and cross-checks every reported
time against its own wall clock (``wall_suspect``) and its own timing of the original.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

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
_perf = time.perf_counter

Launch = Callable[[], Any]
# ``between(i)``: work queued before replay i and, with i == replays, after the last, outside the timed window
# (replay_guard.ReplayGuard: outputs poisoned before every replay, one replay's outputs kept for the checker)
Between = Callable[[int], None]


@triton.jit
def _copy16_kernel(src, dst, BLOCK: tl.constexpr):
    # int32 x BLOCK per program with BLOCK = 4 * 32 * num_warps * k: each thread moves k 16-byte vectors
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs))

_BOUND: dict[str, tuple[Any, str, Any]] = {
    "torch.cuda.Event.elapsed_time": (torch.cuda.Event, "elapsed_time", _elapsed),
    "torch.cuda.Event.record": (torch.cuda.Event, "record", _record),
    "torch.cuda.Event": (torch.cuda, "Event", _Event),
    "torch.cuda.CUDAGraph.replay": (torch.cuda.CUDAGraph, "replay", _replay),
    "torch.cuda.CUDAGraph": (torch.cuda, "CUDAGraph", _Graph),
    "torch.cuda.synchronize": (torch.cuda, "synchronize", _sync),
    "torch.cuda.graph": (torch.cuda, "graph", _graph_ctx),
    "time.perf_counter": (time, "perf_counter", _perf),
}
_CODE: dict[str, types.CodeType] = {}


def watch_code(module: types.ModuleType) -> None:
    """Remember the code of every function and method defined in ``module`` (for ``tampered``)."""
    for name, obj in vars(module).items():
        if isinstance(obj, types.FunctionType) and obj.__module__ == module.__name__:
            _CODE[f"{module.__name__}.{name}"] = obj.__code__
        elif isinstance(obj, type) and obj.__module__ == module.__name__:
            for attr, fn in vars(obj).items():
                if isinstance(fn, types.FunctionType):
                    _CODE[f"{module.__name__}.{name}.{attr}"] = fn.__code__
    _CODE[f"{module.__name__}:module"] = module  # type: ignore[assignment]


def tampered() -> list[str]:
    """What was rebound since import: a timing primitive, or a watched function's code (or its module)."""
    bad = [name for name, (owner, attr, obj) in _BOUND.items() if getattr(owner, attr, None) is not obj]
    for key, code in _CODE.items():
        if key.endswith(":module"):
            mod_name = key[: -len(":module")]
            if sys.modules.get(mod_name) is not code:
                bad.append(f"sys.modules[{mod_name!r}]")
            continue
        mod_name, _, rest = key.rpartition(".")
        obj: Any = sys.modules.get(mod_name)
        if obj is None:  # a method: module.Class.method
            mod_name, _, cls = mod_name.rpartition(".")
            obj = getattr(sys.modules.get(mod_name), cls, None)
        fn = getattr(obj, rest, None)
        if getattr(fn, "__code__", None) is not code:
            bad.append(key)
    return bad


# ----------------------------------------------------------------------------------- statistics


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


def abba(i: int, n: int) -> range:
    """The order of ``n`` implementations in round ``i``: A B, then B A, ... so drift hits all alike."""
    return range(n) if i % 2 == 0 else range(n - 1, -1, -1)


def verdict(speedup: float | None, spread_pct: float, suspect: bool) -> str:
    if speedup is None:
        return "original only"
    if suspect:
        return "suspect"
    if abs(speedup - 1.0) * 100.0 <= spread_pct:
        return "no change"
    return "faster" if speedup > 1.0 else "slower"


def rotation_sets(bytes_moved: int, l2: int, factor: float, max_sets: int, cold: bool) -> int:
    """How many argument sets one replay cycles through so that, in cold mode, it touches > factor x L2."""
    if not cold:
        return 1
    return max(2, min(max_sets, math.ceil(factor * l2 / max(bytes_moved, 1)) + 1))


def wall_suspect(reported_us: float, wall_us: float, replays: int, latency_us: float, ratio: float,
                 per_replay_allow_us: float = 5.0) -> str | None:
    """Does a batch's reported time fall far below the wall time the checker saw it take?

    A GPU-bound replay keeps the device busy from the first event to the last, so the reported total cannot be
    far below the wall time of the batch less the round trip and a few microseconds of host work per replay.
    Kernels shorter than that host work are not covered (the allowance swallows them).
    """
    budget = wall_us - latency_us - replays * per_replay_allow_us
    if budget <= 0 or reported_us >= ratio * budget:
        return None
    return (f"reported {reported_us:.0f} us for {replays} replays that took {wall_us:.0f} us of wall time "
            f"(below {ratio:.0%} of it after {latency_us + replays * per_replay_allow_us:.0f} us of allowances)")


# ----------------------------------------------------------------------------------- clocks


class Clock(Protocol):
    def capture(self, launch: Launch, eager_first: bool = True) -> Any: ...
    def replay(self, graph: Any) -> None: ...
    def time_replays(self, graph: Any, replays: int, launches_per_replay: int,
                     between: Between | None = None) -> list[float]: ...
    def time_eager(self, launch: Launch, replays: int, launches_per_replay: int) -> list[float]: ...
    def sync(self) -> None: ...
    def warm(self, seconds: float) -> None: ...
    def copy_ceiling_gbps(self) -> float: ...
    def l2_bytes(self) -> int: ...
    def device_name(self) -> str: ...


class CudaClock:
    """CUDA-graph replay between CUDA events. Replaying runs only what was captured: work forked onto side
    streams is joined into the graph (and counted); work hidden elsewhere is not replayed, and the re-check
    after timing finds its output missing."""

    def capture(self, launch: Launch, eager_first: bool = True) -> Any:
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

    def replay(self, graph: Any) -> None:
        _replay(graph)

    def time_replays(self, graph: Any, replays: int, launches_per_replay: int,
                     between: Between | None = None) -> list[float]:
        starts = [_Event(enable_timing=True) for _ in range(replays)]
        ends = [_Event(enable_timing=True) for _ in range(replays)]
        for i in range(replays):
            if between is not None:
                between(i)
            _record(starts[i])
            _replay(graph)
            _record(ends[i])
        if between is not None:
            between(replays)
        _sync()
        return [_elapsed(starts[i], ends[i]) * 1000.0 / launches_per_replay for i in range(replays)]

    def time_eager(self, launch: Launch, replays: int, launches_per_replay: int) -> list[float]:
        """When the original cannot be captured: all streams synchronised before each end event."""
        out = []
        for _ in range(replays):
            s, e = _Event(enable_timing=True), _Event(enable_timing=True)
            _record(s)
            launch()
            _sync()
            _record(e)
            e.synchronize()
            out.append(_elapsed(s, e) * 1000.0 / launches_per_replay)
        return out

    def sync(self) -> None:
        _sync()

    def warm(self, seconds: float) -> None:
        """The H200 idles at 345 MHz; keep it busy until clocks are up."""
        if seconds <= 0:
            return
        n = 1 << 26
        src = torch.empty(n, dtype=torch.int32, device="cuda")
        dst = torch.empty_like(src)
        kernel = _copy16_kernel
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            for _ in range(20):
                kernel[(n // 2048,)](src, dst, BLOCK=2048, num_warps=4)
            _sync()

    def copy_ceiling_gbps(self, nbytes: int = 1 << 30, rep: int = 30) -> float:
        """Device copy bandwidth (bytes read + written) of a 16 B/thread copy kernel, CUDA-graph timed, best
        config. Not ``Tensor.copy_``: captured in a graph it becomes a copy-engine memcpy node (2762 vs 4279
        GB/s on H200)."""
        n = nbytes // 4
        src = torch.ones(n, dtype=torch.int32, device="cuda")
        dst = torch.empty_like(src)
        kernel = _copy16_kernel
        best = 0.0
        for block, warps in ((512, 4), (2048, 4), (4096, 8)):
            if n % block:
                continue
            def copy(s: Any = src, d: Any = dst, b: int = block, w: int = warps) -> None:
                kernel[(n // b,)](s, d, BLOCK=b, num_warps=w)

            g = self.capture(copy)
            self.time_replays(g, 5, 1)
            best = max(best, 2 * nbytes / (statistics.median(self.time_replays(g, rep, 1)) * 1e-6) / 1e9)
            del g
        if not bool(torch.equal(src[:1024], dst[:1024])):
            raise RuntimeError("copy-ceiling kernel produced wrong data")
        del src, dst
        torch.cuda.empty_cache()
        return best

    def l2_bytes(self) -> int:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        return int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)

    def device_name(self) -> str:
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        return f"{p.name} (sm_{p.major}{p.minor})"


class HostClock:
    """The CPU stand-in (``EvalConfig.simulate_timing``): host timers around plain calls."""

    def capture(self, launch: Launch, eager_first: bool = True) -> Any:
        if eager_first:
            launch()
        return launch

    def replay(self, graph: Any) -> None:
        graph()

    def time_replays(self, graph: Any, replays: int, launches_per_replay: int,
                     between: Between | None = None) -> list[float]:
        out = []
        for i in range(replays):
            if between is not None:
                between(i)
            t0 = _perf()
            graph()
            out.append((_perf() - t0) * 1e6 / launches_per_replay)
        if between is not None:
            between(replays)
        return out

    def time_eager(self, launch: Launch, replays: int, launches_per_replay: int) -> list[float]:
        return self.time_replays(launch, replays, launches_per_replay)

    def sync(self) -> None:
        return None

    def warm(self, seconds: float) -> None:
        return None

    def copy_ceiling_gbps(self) -> float:
        return 1.0  # host "ceiling": everything is far below or above it; meaningless by design

    def l2_bytes(self) -> int:
        return 4096

    def device_name(self) -> str:
        return "cpu (simulated timing, TRITON_INTERPRET=1)"


def clock_for(device: str) -> Clock:
    return CudaClock() if device == "cuda" else HostClock()


def interleave(sides: list[Callable[[int], None]], rep: int, batch: int = 1) -> None:
    """The one ABBA loop: ``rep`` replays per side in batches of ``batch``, each batch's sides in ``abba`` order,
    so drift (clocks, temperature, a neighbour) hits every side alike. A side is called with its batch's size."""
    for b in range(max(1, -(-rep // batch))):
        k = min(batch, rep - b * batch)
        for j in abba(b, len(sides)):
            sides[j](k)


def time_interleaved(clock: Clock, launches: list[Launch], warmup: int, rep: int,
                     launches_per_replay: int = 1) -> tuple[list[Samples], str]:
    """Time launch functions against each other in one process: each captured into a graph (all eager if any
    capture fails), warm-up, then ``rep`` ABBA-interleaved replays. Returns the samples and the method."""
    try:
        graphs = [clock.capture(f) for f in launches]
        run = lambda g, n: clock.time_replays(g, n, launches_per_replay)  # noqa: E731
        method = "cuda-graph replay" if isinstance(clock, CudaClock) else "host-timed calls (simulated)"
    except Exception:  # noqa: BLE001 - not capturable: plain calls, fully synchronised
        graphs = list(launches)
        run, method = (lambda f, n: clock.time_eager(f, n, launches_per_replay)), "eager, synchronised"
    for _ in range(warmup):
        for g in graphs:
            run(g, 1)
    out: list[list[float]] = [[] for _ in graphs]

    def side(j: int) -> Callable[[int], None]:
        return lambda k: out[j].extend(run(graphs[j], k))
    interleave([side(j) for j in range(len(graphs))], rep)
    return [Samples(x) for x in out], method


watch_code(sys.modules[__name__])
