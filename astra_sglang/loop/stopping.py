"""When to stop before --rounds: the best is (nearly) at the copy bound, or rounds stopped bringing gains.

The copy bound of a shape is the time a plain device copy of the bytes the kernel must move would take (the
harness's measured copy ceiling); a memory-bound kernel cannot beat it, so once the best candidate is within
``--stop-at-bound-margin`` of it on the timed shapes (geometric mean) more rounds can only add noise.
"""

from __future__ import annotations

import math

from astra_sglang.contract.result import ShapeTiming
from astra_sglang.loop.records import RoundRecord
from astra_sglang.loop.winner import flat, ranked, speed_on_ranking_gpu


def bound_fraction(times: list[ShapeTiming]) -> float | None:
    """Geometric mean over the timed shapes of (candidate bandwidth / copy ceiling); None without timing."""
    pcts = [s.candidate_pct_ceiling for s in times if s.candidate_pct_ceiling]
    if not pcts or len(pcts) != len(times):
        return None
    return math.exp(sum(math.log(p / 100.0) for p in pcts) / len(pcts))


def best_per_round(records: list[RoundRecord]) -> list[tuple[int, float | None]]:
    """(round, the fastest competing candidate's geomean speedup on the run's ranking GPU, its own or a re-time
    there; None when none was timed and correct there). ``records``: the run's rounds, all of them, so that a
    later round's re-times count."""
    _, speeds = speed_on_ranking_gpu(records)
    out = []
    for r in sorted(records, key=lambda r: r.round):
        if r.round == 0:
            continue
        there = [v for e in r.entries() if (v := speeds.get(id(e))) is not None]
        out.append((r.round, max(there) if there else None))
    return out


def stop_reason(records: list[RoundRecord], patience: int | None, margin: float | None) -> str | None:
    if margin is not None:
        top = ranked(flat(records))
        if top:
            frac = bound_fraction(top[0].times)
            if frac is not None and frac >= 1.0 - margin:
                return (f"the best ({top[0].key}, {top[0].geomean_speedup:.3f}x) runs at {100 * frac:.1f}% of the "
                        f"copy bound, within --stop-at-bound-margin {margin}")
    if patience is not None:
        best, since = 1.0, 0  # the original is 1.0x: a round only gains by beating the best so far
        for _, speed in best_per_round(records):
            if speed is not None and speed > best:
                best, since = speed, 0
            else:
                since += 1
        if since >= patience:
            return f"{since} round(s) without gain over {best:.3f}x (--patience {patience})"
    return None
