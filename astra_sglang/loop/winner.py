"""Which kernel a round starts from, and the order in which candidates compete for the win.

Only correct candidates count. Speed is the geometric-mean speedup over the timed (test) shapes; a result
the harness flags as suspect (above the copy ceiling) never competes. Without timing (a CPU host) there is
no ranking: the base is then the latest correct kernel, as in the paper's loop.

With K candidates a round every candidate competes on its own: ``flat`` lists them all, and a round's own
line (``round_best``) is only what tables and plots show of it.

Each speedup is against SGLang's kernel timed beside it on the GPU that ran it, and ratios from different GPUs are
not like for like (the same kernel measured 1.755x on an H200 and 1.549x on an H100, 2026-12-05), while the device
pool hands out H100s and H200s. So a run ranks on one GPU, the one that timed its latest candidates
(``ranking_gpu``): a kernel competes with its own times from that GPU, or with a re-time there (``contenders``: a
round's base and the latest round's fastest per GPU are timed again beside the round's candidates when those run on
another GPU, ``RoundRecord.retimes``); a candidate timed only on another GPU does not compete, and
``mixed_gpus_note`` says so.
"""

from __future__ import annotations

from astra_sglang.loop.records import RoundRecord
from astra_sglang.platform_info import gpu_of_text, same_gpu


def _competes(r: RoundRecord) -> bool:
    return bool(r.correct) and not r.timing_suspect


def gpu_of(r: RoundRecord) -> str | None:
    """The GPU a record's times come from ('NVIDIA H200 (sm_90); cuda-graph replay...' -> 'NVIDIA H200')."""
    return gpu_of_text((r.timing_source or "").split(";", 1)[0]) if r.geomean_speedup is not None else None


def _candidate_gpus(records: list[RoundRecord]) -> list[str]:
    """The GPU of each timed candidate (round > 0), in record order."""
    return [g for r in records if r.round > 0 and (g := gpu_of(r))]


def timing_gpus(records: list[RoundRecord]) -> list[str]:
    """The GPUs that timed the candidates (round > 0) of ``records``, in order of first appearance."""
    return list(dict.fromkeys(_candidate_gpus(records)))


def ranking_gpu(records: list[RoundRecord]) -> str | None:
    """The GPU the run ranks on: the one that timed its latest timed candidate; None for an untimed run."""
    gpus = _candidate_gpus(records)
    return gpus[-1] if gpus else None


Retimes = dict[tuple[int, int | None], list[tuple[str, float | None]]]


def _retimes(records: list[RoundRecord]) -> Retimes:
    """(round, candidate) of a kernel -> its re-times: (GPU, geomean speedup there, None where it was not correct)."""
    out: Retimes = {}
    for r in records:
        for t in r.retimes:
            out.setdefault((t.of_round, t.of_candidate), []).append(
                (t.gpu, t.geomean_speedup if t.correct else None))
    return out


def _speed_on(r: RoundRecord, gpu: str | None, retimes: Retimes) -> float | None:
    """``r``'s geomean speedup on ``gpu``: its own, or a re-time there; None where it has none (the original is
    1.0 everywhere). With ``gpu`` None (an untimed run) its own, whatever it is."""
    if r.round == 0:
        return 1.0
    own = gpu_of(r)
    if gpu is None or (own is not None and same_gpu(own, gpu)):
        return r.geomean_speedup
    return next((v for g, v in retimes.get((r.round, r.candidate), []) if same_gpu(g, gpu)), None)


def _speeds(records: list[RoundRecord]) -> tuple[str | None, dict[int, float | None]]:
    """The ranking GPU and every record's speed there (by ``id``)."""
    gpu, retimes = ranking_gpu(records), _retimes(records)
    return gpu, {id(r): _speed_on(r, gpu, retimes) for r in records}


def contenders(records: list[RoundRecord], base: RoundRecord) -> list[tuple[RoundRecord, str]]:
    """What a new round's evaluation should time again should it run on another GPU: the base, and the fastest
    correct candidate of the latest round on each GPU that timed it (a pass cut short leaves a K-candidate round
    split over two GPUs); each with the GPU its standing time is from (the ranking GPU where it has a time there).
    The GPU host times those whose GPU is not its own, so after the pass all of them stand on the new round's GPU
    beside its candidates; on their own GPU it answers "not re-timed" at once, costing nothing."""
    gpu, speeds = _speeds(records)
    if gpu is None:
        return []
    picked: list[RoundRecord] = [base] if base.round > 0 else []
    latest = max((r.round for r in records), default=0)
    best: dict[str, RoundRecord] = {}
    for r in records:
        g = gpu_of(r)
        if r.round == latest > 0 and g and _competes(r) and (g not in best or (r.geomean_speedup or 0.0)
                                                                > (best[g].geomean_speedup or 0.0)):
            best[g] = r
    picked += [r for r in best.values() if r is not base]
    return [(r, gpu if speeds[id(r)] is not None else (gpu_of(r) or gpu)) for r in picked]


def same_gpu_text(a: str | None, b: str | None) -> bool:
    """Whether two results' device texts ('NVIDIA H200 (sm_90)') name one GPU model: only then may their times
    stand side by side (a sweep baseline from the H100 beside a winner timed on the H200 made a 1.755x "beat"
    1.514x, 2026-12-06)."""
    ga, gb = gpu_of_text(a or ""), gpu_of_text(b or "")
    if ga is not None and gb is not None:
        return same_gpu(ga, gb)
    return bool(a) and ga is None and gb is None and same_gpu(a or "", b or "")  # one non-GPU host's own words


def mixed_gpus_note(records: list[RoundRecord]) -> str | None:
    """One sentence when candidates were timed on more than one GPU, else None."""
    gpus = timing_gpus(records)
    if len(gpus) < 2:
        return None
    gpu, speeds = _speeds(records)
    left = [r.key for r in records if r.round > 0 and _competes(r) and r.geomean_speedup is not None
            and speeds[id(r)] is None]
    return (f"candidates were timed on {len(gpus)} GPUs ({', '.join(gpus)}): each speedup is against SGLang's "
            f"kernel on its own GPU, and ratios from different GPUs are not like for like, so the ranking uses "
            f"times from {gpu} only (the latest), with the kernels that compete re-timed there"
            + (f"; not competing, timed only on another GPU: {', '.join(left)}" if left else ""))


def flat(records: list[RoundRecord]) -> list[RoundRecord]:
    """Every candidate of every round, in order (a one-candidate round is its own candidate)."""
    return [e for r in records for e in r.entries()]


def pick_base(records: list[RoundRecord]) -> RoundRecord:
    """The best correct kernel so far on the run's ranking GPU (round 0, the original, counts as 1.0x); ties go to
    the latest. Untimed (a CPU host): the latest correct kernel."""
    gpu, speeds = _speeds(records)
    pool = [r for r in records if r.round == 0 or (_competes(r) and (gpu is None or speeds[id(r)] is not None))]
    if not pool:
        raise ValueError("no round 0 record: the original must be measured first")

    def key(r: RoundRecord) -> tuple[float, int, int]:
        speed = speeds[id(r)]
        return (speed if speed is not None else 1.0), r.round, -(r.candidate or 0)  # within a round, the first plan

    return max(pool, key=key)


def speed_on_ranking_gpu(records: list[RoundRecord]) -> tuple[str | None, dict[int, float | None]]:
    """The ranking GPU of a run's rounds and each competing candidate's speed there (by ``id``; None where it has
    no time there, or does not compete). The speed a table may print beside another round's: a round's own best
    mixed GPUs, so a report said 1.755x best so far (an H200 time) for a run ranking on the H100, where that
    kernel re-timed 1.534x (2026-12-05)."""
    entries = flat(records)
    gpu, speeds = _speeds(entries)
    return gpu, {id(e): (speeds[id(e)] if _competes(e) else None) for e in entries}


def ranked(records: list[RoundRecord]) -> list[RoundRecord]:
    """Candidates (round > 0) that may win, fastest first, by their speed on the run's ranking GPU."""
    _, speeds = _speeds(records)
    pool = [r for r in records if r.round > 0 and _competes(r) and speeds[id(r)] is not None]
    return sorted(pool, key=lambda r: (-(speeds[id(r)] or 0.0), r.round, r.candidate or 0))


_STATUS_ORDER = {"ok": 0, "incorrect": 1, "build_failed": 2, "failed": 3}


def round_best(candidates: list[RoundRecord]) -> RoundRecord:
    """The candidate that stands for its round: the fastest that may win, else the first correct one, else the
    one that got furthest (incorrect before build_failed before failed)."""
    fastest = ranked(candidates)
    if fastest:
        return fastest[0]
    return min(candidates, key=lambda r: (0 if r.correct and not r.timing_suspect else 1,
                                          _STATUS_ORDER[r.status], r.candidate or 0))
