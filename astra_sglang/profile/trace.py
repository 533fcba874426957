"""Read a torch.profiler chrome trace (``.json`` or ``.json.gz``): GPU kernel time per step, by kernel name.

Only events of category ``kernel`` count (what ran on the GPU; memcpy/memset events are ``gpu_memcpy`` /
``gpu_memset`` and are left out of the kernel time on purpose, as is CPU time). Steps are found in this order:

1. ``ProfilerStep#N`` annotations (a profiler driven with ``prof.step()``): a kernel belongs to the step whose
   CPU window holds its launch (matched through the ``correlation`` id of the launch event), since GPU kernels
   run after, not inside, the CPU window. Kernels launched outside every step are counted apart, not in a step.
2. A step count the caller knows (``one_batch --profile-steps N`` records N decode steps with no markers): the
   whole trace divided by N.
3. Otherwise the whole trace is one step, and the summary says so.

A kernel launched inside a patch adapter's frame (``astra_sglang/patches/adapters/<op>.py``, a ``python_function``
event of a trace recorded with Python stacks, as one_batch's is) carries that op in ``hook``: the kernels a patch's
hook launches around its own (the decode-attention adapter's copy of a strided q) are the patch's cost, not
"torch elementwise" (2026-12-06: 2.8 us a layer at batch 128 would otherwise hide in another row).

A kernel's time is its own: on one stream, the part of its span that overlaps the kernels before it is left out
(``overlap_us`` keeps it). With programmatic dependent launch (PDL, sm_90) a kernel starts while the one before it
still runs and waits in ``griddepcontrol.wait``; its trace span then holds the other kernel's tail. SGLang's MoE
SiLU-and-mul (``act_and_mul_kernel``, PDL on) read 43.7 us a call at batch 128 behind the fused-MoE GEMM
(2026-12-03-evening), for a 4.7-MB elementwise pass: most likely the GEMM's tail, counted twice by a sum of spans
(read from the source; not yet confirmed on a GPU).
"""

from __future__ import annotations

import gzip
import json
import re
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from astra_sglang.errors import AstraError

STEP_PREFIX = "ProfilerStep#"
_GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")
# one_batch's trace names: <prefix>_batch<bs>_input<in>_output<out>_<stage>.trace.json.gz
ONE_BATCH_NAME = re.compile(r"_batch(?P<bs>\d+)_input(?P<input>\d+)_output(?P<output>\d+)_(?P<stage>prefill|decode)")
# a frame of a patch adapter's module (python_function names are "<path>(<line>): <function>")
HOOK_FRAME = re.compile(r"astra_sglang/patches/adapters/(?P<op>\w+)\.py\(\d+\): ")


class TraceError(AstraError, ValueError):
    """A file that is not a readable chrome trace with GPU kernels: one line, no traceback."""


@dataclass
class KernelTime:
    """One kernel name's GPU time over the counted steps."""

    name: str
    total_us: float = 0.0
    calls: int = 0
    hook: str | None = None  # the adapter module (an op short name) whose frame launched it; None: none did
    overlap_us: float = 0.0  # span overlapping earlier kernels of its stream (PDL waits), not in total_us


def _key(name: str, hook: str | None) -> str:
    """A kernel's row: one per name, and apart from it the same name launched from a patch hook."""
    return name if hook is None else f"{name} [launched by the {hook} patch hook]"


@dataclass
class TraceSummary:
    path: str
    steps: int
    step_source: str  # how the steps were found, said in the output
    kernels: dict[str, KernelTime]  # over the counted steps
    step_gpu_us: list[float] = field(default_factory=list)  # per step; one entry per step when markers exist
    outside_us: float = 0.0  # kernels launched outside every ProfilerStep (only with markers)

    @property
    def total_us(self) -> float:
        return sum(k.total_us for k in self.kernels.values())

    @property
    def gpu_us_per_step(self) -> float:
        return self.total_us / self.steps if self.steps else 0.0


def load_events(path: Path) -> list[dict[str, Any]]:
    """The trace's event list; TraceError for anything that is not a chrome trace."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"no trace file {path}")
    try:
        raw = gzip.open(path, "rt").read() if path.name.endswith(".gz") else path.read_text()
        data = json.loads(raw)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TraceError(f"{path} is not a chrome trace (.json or .json.gz): {e}") from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise TraceError(f"{path} is not a chrome trace: no traceEvents list")
    return [e for e in events if isinstance(e, dict)]


def _steps(events: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """CPU windows of the ProfilerStep annotations, in time order (GPU-side copies of them are skipped)."""
    windows = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in events
               if str(e.get("name", "")).startswith(STEP_PREFIX) and e.get("cat") not in _GPU_CATS
               and e.get("ph") == "X" and "ts" in e]
    return sorted(windows)


def summarize(path: Path, steps: int | None = None) -> TraceSummary:
    """GPU kernel time by name, per step (see the module docstring for how steps are found)."""
    events = load_events(path)
    kernels = [e for e in events if e.get("cat") == "kernel" and e.get("ph", "X") == "X" and "dur" in e]
    if not kernels:
        raise TraceError(f"{path} has no GPU kernel events (cat 'kernel'): record it with GPU activity "
                         "(torch.profiler ProfilerActivity.CUDA; one_batch --profile-activities GPU)")
    _own_times(kernels)
    windows = _steps(events)
    launches = {e["args"]["correlation"]: (e.get("tid"), float(e["ts"])) for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and isinstance(e.get("args"), dict)
                and "correlation" in e["args"] and "ts" in e}
    hook_of = _hook_finder(events, launches)
    if windows:
        launch_ts = {c: ts for c, (_, ts) in launches.items()}
        return _by_markers(path, kernels, windows, launch_ts, hook_of)
    n = steps or 1
    source = (f"{n} steps as profiled (no step markers in the trace): per step = whole trace / {n}" if steps
              else "whole trace as one step (no ProfilerStep markers; give --steps N if it holds N steps)")
    table: dict[str, KernelTime] = {}
    for e in kernels:
        _count(table, e, hook_of(e))
    total = sum(k.total_us for k in table.values())
    return TraceSummary(str(path), n, source, table, [total / n] * n)


_OWN = "_astra_own_us"  # set on each kernel event by _own_times


def _own_times(kernels: list[dict[str, Any]]) -> None:
    """Each kernel's own time (``_OWN``): its span less the part that overlaps kernels before it on its stream
    (device ``pid``, stream ``tid``), so a stream's kernel times add up to the time it was busy."""
    streams: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for e in kernels:
        streams.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for stream in streams.values():
        stream.sort(key=lambda e: float(e.get("ts", 0.0)))
        busy_until = float("-inf")
        for e in stream:
            start = float(e.get("ts", 0.0))
            end = start + float(e["dur"])
            e[_OWN] = max(0.0, end - max(start, busy_until))
            busy_until = max(busy_until, end)


def _own(e: dict[str, Any]) -> float:
    return float(e.get(_OWN, e["dur"]))


def _count(table: dict[str, KernelTime], e: dict[str, Any], hook: str | None) -> None:
    name = str(e.get("name", "?"))
    k = table.setdefault(_key(name, hook), KernelTime(name, hook=hook))
    own = _own(e)
    k.total_us += own
    k.overlap_us += float(e["dur"]) - own
    k.calls += 1


def _hook_finder(events: list[dict[str, Any]],
                 launches: dict[Any, tuple[Any, float]]) -> Callable[[dict[str, Any]], str | None]:
    """kernel event -> the adapter whose frame (on the launching thread) holds its launch, or None. An adapter's
    nested frames are merged into one interval and adapters do not call one another, so the latest interval
    starting at or before the launch is the only candidate."""
    frames: dict[Any, list[tuple[float, float, str]]] = {}
    for e in events:
        if e.get("cat") != "python_function" or "ts" not in e:
            continue
        m = HOOK_FRAME.search(str(e.get("name", "")))
        if m:
            start = float(e["ts"])
            frames.setdefault(e.get("tid"), []).append((start, start + float(e.get("dur", 0)), m["op"]))
    if not frames:
        return lambda e: None
    for tid, f in frames.items():  # nested frames of one adapter (a helper its launch calls) -> one interval
        f.sort()
        merged = [f[0]]
        for a, b, op in f[1:]:
            if a <= merged[-1][1] and op == merged[-1][2]:
                merged[-1] = (merged[-1][0], max(b, merged[-1][1]), op)
            else:
                merged.append((a, b, op))
        frames[tid] = merged
    starts = {tid: [a for a, _, _ in f] for tid, f in frames.items()}

    def hook_of(e: dict[str, Any]) -> str | None:
        args = e.get("args")
        launch = launches.get(args.get("correlation")) if isinstance(args, dict) else None
        if launch is None or launch[0] not in frames:
            return None
        tid, ts = launch
        i = bisect_right(starts[tid], ts) - 1
        if i < 0:
            return None
        _, end, op = frames[tid][i]
        return op if ts <= end else None

    return hook_of


def _by_markers(path: Path, kernels: list[dict[str, Any]], windows: list[tuple[float, float]],
                launch_ts: dict[Any, float], hook_of: Callable[[dict[str, Any]], str | None]) -> TraceSummary:
    table: dict[str, KernelTime] = {}
    per_step = [0.0] * len(windows)
    outside = 0.0
    for e in kernels:
        args = e.get("args")
        ts = launch_ts.get(args.get("correlation")) if isinstance(args, dict) else None
        step = None if ts is None else next((i for i, (a, b) in enumerate(windows) if a <= ts <= b), None)
        if step is None:
            outside += _own(e)
            continue
        per_step[step] += _own(e)
        _count(table, e, hook_of(e))
    if not table:
        raise TraceError(f"{path}: no kernel was launched inside a {STEP_PREFIX} window (launch events with "
                         "correlation ids missing?)")
    return TraceSummary(str(path), len(windows), f"{len(windows)} ProfilerStep markers", table, per_step, outside)


def one_batch_name(path: Path) -> dict[str, Any]:
    """Batch size, lengths and phase read off one_batch's trace file name; {} for any other name."""
    m = ONE_BATCH_NAME.search(Path(path).name)
    if not m:
        return {}
    return {"batch_size": int(m["bs"]), "input_len": int(m["input"]), "output_len": int(m["output"]),
            "phase": m["stage"]}
