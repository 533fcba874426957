"""Which kernel a round starts from, and the order in which candidates compete for the win.

Only correct candidates count. Speed is the geometric-mean speedup over the timed (test) shapes; a result
the harness flags as suspect (above the copy ceiling) never competes. Without timing (a CPU host) there is
no ranking: the base is then the latest correct kernel, as in the paper's loop.
"""

from __future__ import annotations

from astra_sglang.loop.records import RoundRecord


def _competes(r: RoundRecord) -> bool:
    return bool(r.correct) and not r.timing_suspect


def pick_base(records: list[RoundRecord]) -> RoundRecord:
    """The best correct kernel so far (round 0, the original, counts as 1.0x); ties go to the latest."""
    pool = [r for r in records if _competes(r) or r.round == 0]
    if not pool:
        raise ValueError("no round 0 record: the original must be measured first")

    def key(r: RoundRecord) -> tuple[float, int]:
        speed = 1.0 if r.round == 0 else (r.geomean_speedup if r.geomean_speedup is not None else 1.0)
        return speed, r.round

    return max(pool, key=key)


def ranked(records: list[RoundRecord]) -> list[RoundRecord]:
    """Candidates (round > 0) that may win, fastest first."""
    pool = [r for r in records if r.round > 0 and _competes(r) and r.geomean_speedup is not None]
    return sorted(pool, key=lambda r: (-(r.geomean_speedup or 0.0), r.round))
