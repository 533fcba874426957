"""Two hot lists of the same forward side by side (patches off, patches on): where the step's GPU time moved.

A patch's kernel bench predicts a saving per call; the end-to-end step realised 76% of it for decode attention at
batch 128 (H100, 2026-12-05-e) and nothing said where the rest went. This puts each op's (or group's) GPU time per
step in both traces next to each other, so the in-situ saving of the patched op, and any growth elsewhere (a
slower neighbour, an extra copy), is read off one table instead of two JSON files. Rows are keyed by the op id a
kernel is attributed to (the patch's own kernels map to the op they replace) or by its group, so a patch whose
kernels have other names still lines up with the original's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from astra_sglang.errors import AstraError
from astra_sglang.profile.attribution import HotList


@dataclass(frozen=True)
class CompareRow:
    key: str  # op id or group
    a_us_per_step: float
    b_us_per_step: float
    a_calls_per_step: float
    b_calls_per_step: float

    @property
    def delta_us(self) -> float:
        return self.b_us_per_step - self.a_us_per_step

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "delta_us_per_step": self.delta_us}


@dataclass(frozen=True)
class Comparison:
    a_trace: str
    b_trace: str
    a_gpu_us_per_step: float
    b_gpu_us_per_step: float
    rows: list[CompareRow]  # largest change first
    # each row's kernels (op id or group -> rows keyed by kernel name), largest change first within a row: which
    # kernel of a patched op grew (the patch's stage 2, 4.9 -> 15.7 us a call at
    # batch 128 on the H100, 2026-12-06, was read off the raw traces by hand before this)
    kernels: dict[str, list[CompareRow]] = field(default_factory=dict)

    @property
    def delta_us(self) -> float:
        return self.b_gpu_us_per_step - self.a_gpu_us_per_step

    def to_json(self) -> dict[str, Any]:
        return {"a_trace": self.a_trace, "b_trace": self.b_trace, "a_gpu_us_per_step": self.a_gpu_us_per_step,
                "b_gpu_us_per_step": self.b_gpu_us_per_step, "delta_us_per_step": self.delta_us,
                "rows": [r.to_json() for r in self.rows],
                "kernels": {k: [r.to_json() for r in rows] for k, rows in self.kernels.items()}}


def _by_key(hl: HotList, kernels: bool = False) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    for r in hl.rows:
        key = f"{r.op}\0{r.kernel}" if kernels else r.op
        us, calls = out.get(key, (0.0, 0.0))
        out[key] = (us + r.us_per_step, calls + r.calls_per_step)
    return out


def _rows(ka: dict[str, tuple[float, float]], kb: dict[str, tuple[float, float]]) -> list[CompareRow]:
    rows = []
    for k in {*ka, *kb}:
        (ua, ca), (ub, cb) = ka.get(k, (0.0, 0.0)), kb.get(k, (0.0, 0.0))
        rows.append(CompareRow(k, ua, ub, ca, cb))
    rows.sort(key=lambda r: (-abs(r.delta_us), r.key))
    return rows


def compare(a: HotList, b: HotList) -> Comparison:
    """B against A per op or group. Refuses hot lists of different phases or batch sizes (where both are known):
    their difference would be the shape's, not the patch's."""
    for what, x, y in (("phase", a.phase, b.phase), ("batch size", a.batch_size, b.batch_size)):
        if x is not None and y is not None and x != y:
            raise AstraError(f"--compare: the two traces differ in {what} ({x} vs {y}); compare one shape's "
                             "traces with patches off and on")
    rows = _rows(_by_key(a), _by_key(b))
    kernels: dict[str, list[CompareRow]] = {r.key: [] for r in rows}
    for kr in _rows(_by_key(a, kernels=True), _by_key(b, kernels=True)):
        op, kernel = kr.key.split("\0", 1)
        kernels[op].append(replace(kr, key=kernel))
    return Comparison(a.trace, b.trace, a.gpu_us_per_step, b.gpu_us_per_step, rows, kernels)
