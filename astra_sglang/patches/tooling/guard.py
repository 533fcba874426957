"""A patch's guard from per-shape measurements: serve exactly where it beat what SGLang serves, beyond the spread.

Why not a range typed by hand: the first fused_add_rmsnorm guard (T 128..512, from the four paper shapes) served
none of the decode calls where the patch was 1.4-1.7x faster (T = 1..128) and took in T = 512 at H = 4096, where it
was 0.96x. The measurements (``bench OP --candidate F --shapes all --heldout --json``: decode, prefill, paper and
held-out shapes) decide instead:

- a shape *wins* when every measured dtype there is faster than SGLang's served kernel by more than the spread of
  the timed samples, and no measurement of it is suspect (above the copy ceiling, clock disagreement);
- along the row dim (the adapter's first: tokens), consecutive winning shapes make one run: the guard serves from
  the first to the last of a run, never across a measured shape that did not win;
- the other dims are pinned to the measured values, and two measured values are joined into one range only when
  their runs are identical and no measured value lies between them: the patch serves between two measured
  points that agree, and nowhere beyond the measured ends;
- dtypes: those measured;
- per GPU model: rows timed on several GPU models are judged per model (``GuardSpec.gpu_regions``), since an H100
  and an H200 (both sm_90) win on different shapes; ``regions`` is then the union.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from astra_sglang.contract.op import Manifest
from astra_sglang.contract.patch import DimRange, GuardRow, GuardSpec
from astra_sglang.contract.result import EvalResult
from astra_sglang.errors import AstraError
from astra_sglang.platform_info import gpu_of_text

Point = tuple[int, ...]


def within_contract(guard: GuardSpec, manifest: Manifest) -> GuardSpec:
    """``guard`` cut to what the op contract declares: its dtypes, and for every dim the contract names, its
    min, max and multiple. A patch then never serves a call its contract could not check (the adapter's ranges
    are written by hand, the contract's are what the harness draws cases from). Nothing left is one error."""
    dtypes = [d for d in guard.dtypes if d in manifest.signature.dtypes]
    if not dtypes:
        raise AstraError(f"guard dtypes {guard.dtypes}: the {manifest.short_name} contract checks only "
                         f"{manifest.signature.dtypes}")
    declared = {d.name: d for d in manifest.signature.dims}
    dims = dict(guard.dims)
    for name, r in guard.dims.items():
        d = declared.get(name)
        if d is None:
            continue
        hi = r.max if d.max is None else d.max if r.max is None else min(r.max, d.max)
        mult = math.lcm(r.multiple_of, d.multiple_of)
        cut = DimRange(min=max(r.min, d.min), max=hi, multiple_of=mult)
        if cut.max is not None and -(-cut.min // mult) * mult > cut.max:
            raise AstraError(f"guard {name} [{r.min}, {r.max}] x{r.multiple_of}: nothing of it lies inside the "
                             f"{manifest.short_name} contract's {name} [{d.min}, {d.max}] x{d.multiple_of}")
        dims[name] = cut
    return guard.model_copy(update={"dtypes": dtypes, "dims": dims})


def within_shapes(guard: GuardSpec, manifest: Manifest) -> GuardSpec:
    """``guard`` cut, dim by dim, to the span of the op contract's shapes (the smallest to the largest value each
    dim takes there): where no measurement says more, a patch serves only sizes the contract's shapes reach,
    which every candidate was checked and timed on. A dim the shapes never name keeps its range."""
    dims = dict(guard.dims)
    for name, r in guard.dims.items():
        values = [s.dims[name] for s in manifest.shapes if name in s.dims]
        if not values:
            continue
        lo, hi = max(r.min, min(values)), max(values) if r.max is None else min(r.max, max(values))
        if -(-lo // r.multiple_of) * r.multiple_of > hi:
            raise AstraError(f"guard {name} [{r.min}, {r.max}]: none of it lies between the {manifest.short_name} "
                             f"contract's shapes' {min(values)} and {max(values)}")
        dims[name] = DimRange(min=lo, max=hi, multiple_of=r.multiple_of)
    return guard.model_copy(update={"dims": dims})


def measured_rows(results: Iterable[EvalResult]) -> list[GuardRow]:
    """Every timed shape of the results, against what SGLang serves there (else the original)."""
    rows = []
    for r in results:
        if r.timing is None or (r.correctness is not None and not r.correctness.ok):
            continue
        for s in r.timing.shapes:
            speedup = s.served_speedup if s.served_speedup is not None else s.speedup
            wins = speedup is not None and s.verdict != "suspect" and (speedup - 1.0) * 100.0 > s.spread_pct
            rows.append(GuardRow(dims=dict(s.dims), dtype=s.dtype, served_by=s.served_by,
                                 served_us=s.served_us if s.served_us is not None else s.original_us,
                                 candidate_us=s.candidate_us, speedup=speedup, spread_pct=s.spread_pct, wins=wins,
                                 gpu=gpu_of_text(r.device)))
    return rows


def rows_behind(results: Iterable[EvalResult], inner: Iterable[EvalResult], inner_guard: GuardSpec,
                inner_id: str) -> list[GuardRow]:
    """``measured_rows`` of a rewrite for standing in front of ``inner_id``, a retune of its op: where the retune
    serves (its guard) and was timed on the same GPU at the same shape, the rewrite is set against the retune, each
    over SGLang's original of its own run (speedup = the rewrite's / the retune's); it keeps such a shape (wins)
    only where it beat the original beyond the spread AND the retune did not beat it beyond the wider of the two
    spreads: a tie stays with the rewrite in front. 2026-12-06, H100, decode attention B 128 S 1033: rewrite 1.228x,
    retune 1.316x over SGLang, and e2e decode B/A 0.896 for the stack against 0.869 for the retune alone."""
    from astra_sglang.loop.winner import same_gpu_text

    timed_inner = [(r.device, s) for r in inner if r.timing is not None and (r.correctness is None or r.correctness.ok)
                   for s in r.timing.shapes]
    rows = []
    for r in results:
        for row in measured_rows([r]):
            mine = next((s for d, s in timed_inner if same_gpu_text(d, r.device) and s.dtype == row.dtype
                         and dict(s.dims) == row.dims), None)
            theirs = None if mine is None else (mine.served_speedup if mine.served_speedup is not None else mine.speedup)
            if (theirs is None or mine is None or mine.verdict == "suspect" or row.speedup is None
                    or not inner_guard.takes(row.dims, row.dtype, row.gpu)):  # the retune serves it on that GPU
                rows.append(row)
                continue
            spread = max(row.spread_pct, mine.spread_pct)
            ratio = row.speedup / theirs
            inner_wins = (1.0 / ratio - 1.0) * 100.0 > spread
            rows.append(row.model_copy(update={
                "served_by": inner_id, "speedup": ratio, "spread_pct": spread, "wins": row.wins and not inner_wins,
                "served_us": None if row.candidate_us is None else row.candidate_us * ratio}))
    return rows


def derive_guard(base: GuardSpec, rows: list[GuardRow], unseen: Iterable[str] = ()) -> tuple[GuardSpec, list[GuardRow]]:
    """``base`` (the adapter's widest guard) narrowed to the winning regions of ``rows``; the rows marked served.

    Rows timed on more than one GPU model are judged per GPU (``gpu_regions``): a shape serves on a GPU where it
    won there, and ``regions`` is the union. AstraError when nothing won anywhere: a patch that beats SGLang nowhere
    it was measured must not be registered. ``unseen``: the sizes the guard cannot see at call time
    (``OpAdapter.unseen_sizes``); a point serves on a GPU only where that GPU timed it at both ends: the shortest
    value of each the rows name (``verify.across_unseen_dims``' twins) and a longer one. Wins at long KV lengths
    alone said nothing of S 512, where both decode-attention patches lost on the H100 (2026-12-07); an H200 record
    without its twins serves nothing until they are timed there. The short end is the shortest value in ``rows``,
    not the contract's: evidence without twins (a fresh `add-run` from the paper set, whose shortest S is 1024)
    serves only the few points timed at two lengths, until `patches verify --record` adds the twins."""
    names = list(base.dims)
    dtypes = [d for d in base.dtypes if any(r.dtype == d for r in rows)]
    inside = [r for r in rows if r.dtype in dtypes and set(names) <= set(r.dims)
              and all(base.dims[n].accepts(r.dims[n]) for n in names)]
    per_gpu: dict[str | None, dict[Point, bool]] = {}
    for r in inside:
        p = tuple(r.dims[n] for n in names)
        wins = per_gpu.setdefault(r.gpu, {})
        wins[p] = wins.get(p, True) and r.wins
    for name in unseen:  # each point timed on that GPU at the shortest value and (where rows name one) a longer one
        timed: dict[tuple[str | None, Point], set[int]] = {}
        for r in inside:
            if name in r.dims:
                timed.setdefault((r.gpu, tuple(r.dims[n] for n in names)), set()).add(r.dims[name])
        short = min((min(v) for v in timed.values()), default=None)
        longer = any(max(v) != short for v in timed.values())
        for gpu, wins in per_gpu.items():
            for p in wins:
                values = timed.get((gpu, p), set())
                wins[p] = wins[p] and short in values and (not longer or max(values) > short)
    gpus = sorted(g for g in per_gpu if g is not None)
    # one GPU (or none named): every row is judged together, as before per-GPU guards; several: a shape may serve
    # wherever some GPU won it, and each GPU serves only its own wins (GuardSpec.on_gpu)
    judge = all if len(gpus) < 2 else any
    union = {p: judge(w[p] for w in per_gpu.values() if p in w) for w in per_gpu.values() for p in w}
    gpu_regions = {g: _regions(base, per_gpu[g]) for g in gpus} if len(gpus) > 1 else {}
    regions = _regions(base, union)
    if not regions:
        raise AstraError(f"the patch beat what SGLang serves beyond the spread on none of the {len(union)} measured "
                         "shape(s) inside its adapter's guard: nothing to serve")
    guard = base.model_copy(update={"dtypes": dtypes, "regions": regions, "gpu_regions": gpu_regions})
    return guard, [r.model_copy(update={"served": guard.takes(r.dims, r.dtype, r.gpu)}) for r in rows]


def _regions(base: GuardSpec, wins: dict[Point, bool]) -> list[dict[str, DimRange]]:
    """The boxes of ``wins`` (measured points -> won): runs along the row dim, joined along the others."""
    names = list(base.dims)
    row_dim, others = names[0], names[1:]
    boxes: list[dict[str, tuple[int, int]]] = []
    for key in sorted({p[1:] for p in wins}):
        line = sorted(p for p in wins if p[1:] == key)
        runs: list[list[int]] = [[]]
        for p in line:
            if wins[p]:
                runs[-1].append(p[0])
            elif runs[-1]:
                runs.append([])
        boxes += [{row_dim: (run[0], run[-1]), **{n: (v, v) for n, v in zip(others, key)}} for run in runs if run]
    for i, name in enumerate(others, start=1):
        boxes = _join_along(boxes, name, i, names, wins)
    return [{n: DimRange(min=lo, max=hi, multiple_of=base.dims[n].multiple_of) for n, (lo, hi) in box.items()}
            for box in boxes]


def _join_along(boxes: list[dict[str, tuple[int, int]]], name: str, index: int, names: list[str],
                points: dict[Point, bool]) -> list[dict[str, tuple[int, int]]]:
    """Join boxes that agree on every dim but ``name`` and are neighbours along it: no measured point of that
    slice lies between them."""
    def same_but(a: dict[str, tuple[int, int]], b: dict[str, tuple[int, int]]) -> bool:
        return all(a[n] == b[n] for n in names if n != name)

    def between(a: dict[str, tuple[int, int]], b: dict[str, tuple[int, int]]) -> bool:
        lo, hi = a[name][1], b[name][0]
        return any(lo < p[index] < hi and all(a[n][0] <= p[j] <= a[n][1] for j, n in enumerate(names) if n != name)
                   for p in points)

    out = sorted(boxes, key=lambda b: [b[n] for n in names])
    joined = True
    while joined:
        joined = False
        for i, a in enumerate(out):
            b = next((b for b in out[i + 1:] if same_but(a, b) and b[name][0] > a[name][1] and not between(a, b)), None)
            if b is not None:
                out.remove(b)
                out[i] = {**a, name: (a[name][0], b[name][1])}
                joined = True
                break
    return out


def guard_table_lines(rows: list[GuardRow]) -> list[str]:
    """The evidence table as text, one measured shape a line (the CLI prints it; the manifest keeps the rows)."""
    out = []
    for r in sorted(rows, key=lambda r: (r.dtype, sorted(r.dims.items()), r.gpu or "")):
        dims = " ".join(f"{k}={v}" for k, v in r.dims.items())
        speed = f"{r.speedup:.3f}x" if r.speedup is not None else "-"
        us = (f"{r.served_us:.2f} -> {r.candidate_us:.2f} us" if r.served_us is not None and r.candidate_us is not None
              else "")
        on = f" on {r.gpu}" if r.gpu else ""
        out.append(f"{dims} {r.dtype}{on}: {speed} vs {r.served_by or 'original'} ({us}, spread {r.spread_pct:.1f}%) "
                   f"{'wins' if r.wins else 'no win'}; {'SERVED' if r.served else (r.served_by or 'original') + ' serves'}")
    return out


def describe(guard: GuardSpec) -> str:
    """The guard in one line, as an operator reads it."""
    def rng(r: DimRange) -> str:
        return str(r.min) if r.max == r.min else f"{r.min}..{r.max if r.max is not None else 'inf'}"

    def text(boxes: list[dict[str, DimRange]]) -> str:
        return " or ".join("(" + ", ".join(f"{n} {rng(r)}" for n, r in box.items()) + ")" for box in boxes)

    line = f"{'/'.join(guard.dtypes)}: " + text(guard.regions or [guard.dims])
    return line + "".join(f"; on {g}: " + (text(b) if b else "nothing") for g, b in guard.gpu_regions.items())
