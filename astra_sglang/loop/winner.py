"""Which kernel a round starts from, and the order in which candidates compete for the win.

Only correct candidates count. Speed is the geometric-mean speedup over the timed (test) shapes; a result
the harness flags as suspect (above the copy ceiling) never competes. Without timing (a CPU host) there is
no ranking: the base is then the latest correct kernel, as in the paper's loop.

With K candidates a round every candidate competes on its own: ``flat`` lists them all, and a round's own
line (``round_best``) is only what tables and plots show of it.

Each speedup is against SGLang's kernel timed beside it on the GPU that ran it. A run whose evaluations landed on
different GPUs (the device pool hands out H100s and H200s) compares ratios from different GPUs, which are not like
for like (the same kernel measured 1.755x on an H200 and 1.549x on an H100, 2026-12-05): ``timing_gpus`` names them
so that the winner and the report say so.
"""

from __future__ import annotations

from astra_sglang.loop.records import RoundRecord
from astra_sglang.platform_info import gpu_of_text


def _competes(r: RoundRecord) -> bool:
    return bool(r.correct) and not r.timing_suspect


def gpu_of(r: RoundRecord) -> str | None:
    """The GPU a record's times come from ('NVIDIA H200 (sm_90); cuda-graph replay...' -> 'NVIDIA H200')."""
    return gpu_of_text((r.timing_source or "").split(";", 1)[0]) if r.geomean_speedup is not None else None


def timing_gpus(records: list[RoundRecord]) -> list[str]:
    """The GPUs that timed the candidates (round > 0) of ``records``, in order of first appearance."""
    seen: list[str] = []
    for r in records:
        g = gpu_of(r) if r.round > 0 else None
        if g and g not in seen:
            seen.append(g)
    return seen


def mixed_gpus_note(records: list[RoundRecord]) -> str | None:
    """One sentence when candidates were timed on more than one GPU, else None."""
    gpus = timing_gpus(records)
    if len(gpus) < 2:
        return None
    return (f"candidates were timed on {len(gpus)} GPUs ({', '.join(gpus)}): each speedup is against SGLang's "
            "kernel on its own GPU, so the ranking across GPUs is not like for like")


def flat(records: list[RoundRecord]) -> list[RoundRecord]:
    """Every candidate of every round, in order (a one-candidate round is its own candidate)."""
    return [e for r in records for e in r.entries()]


def pick_base(records: list[RoundRecord]) -> RoundRecord:
    """The best correct kernel so far (round 0, the original, counts as 1.0x); ties go to the latest."""
    pool = [r for r in records if _competes(r) or r.round == 0]
    if not pool:
        raise ValueError("no round 0 record: the original must be measured first")

    def key(r: RoundRecord) -> tuple[float, int, int]:
        speed = 1.0 if r.round == 0 else (r.geomean_speedup if r.geomean_speedup is not None else 1.0)
        return speed, r.round, -(r.candidate or 0)  # within a round, the first (most promising) plan

    return max(pool, key=key)


def ranked(records: list[RoundRecord]) -> list[RoundRecord]:
    """Candidates (round > 0) that may win, fastest first."""
    pool = [r for r in records if r.round > 0 and _competes(r) and r.geomean_speedup is not None]
    return sorted(pool, key=lambda r: (-(r.geomean_speedup or 0.0), r.round, r.candidate or 0))


_STATUS_ORDER = {"ok": 0, "incorrect": 1, "build_failed": 2, "failed": 3}


def round_best(candidates: list[RoundRecord]) -> RoundRecord:
    """The candidate that stands for its round: the fastest that may win, else the first correct one, else the
    one that got furthest (incorrect before build_failed before failed)."""
    fastest = ranked(candidates)
    if fastest:
        return fastest[0]
    return min(candidates, key=lambda r: (0 if r.correct and not r.timing_suspect else 1,
                                          _STATUS_ORDER[r.status], r.candidate or 0))
