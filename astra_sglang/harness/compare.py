"""Is a candidate's output the original's function? Elementwise, relative, with NaN/inf/poison rules.

Rules, in order: an element still holding the NaN poison was never written; NaN where the original has none
fails; where the original is NaN or +-inf the candidate must be the same; finite elements must be within the
dtype's tolerance of the original (|c - o| <= atol + rtol |o|) and within tolerance of the float32/float64
reference, allowing the original's own distance to it (|c - r| <= atol + rtol |r| + |o - r|).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from astra_sglang.extract.manifest import Tolerance
from astra_sglang.harness.tensors import is_poison


@dataclass
class Mismatch:
    reason: str
    detail: str
    max_abs_err: Optional[float] = None
    max_rel_err: Optional[float] = None
    count: int = 0


def _where(mask: torch.Tensor) -> str:
    idx = mask.nonzero()
    return str(tuple(idx[0].tolist())) if idx.numel() else "?"


def _errors(c: torch.Tensor, o: torch.Tensor) -> tuple[float, float]:
    finite = torch.isfinite(c) & torch.isfinite(o)
    if not bool(finite.any()):
        return 0.0, 0.0
    d = (c - o).abs()[finite]
    rel = d / o.abs()[finite].clamp_min(1e-30)
    return float(d.max()), float(rel.max())


def compare(name: str, cand: torch.Tensor, orig: torch.Tensor, ref: Optional[torch.Tensor],
            tol: Tolerance) -> Optional[Mismatch]:
    if cand.shape != orig.shape:
        return Mismatch("mismatch", f"{name}: shape {tuple(cand.shape)} != original {tuple(orig.shape)}")
    if not cand.dtype.is_floating_point:
        bad = cand != orig
        if bool(bad.any()):
            return Mismatch("mismatch", f"{name}: {int(bad.sum())} elements differ, first at {_where(bad)}",
                            count=int(bad.sum()))
        return None
    unwritten = is_poison(cand) & ~is_poison(orig)
    if bool(unwritten.any()):
        n = int(unwritten.sum())
        return Mismatch("unwritten output", f"{name}: {n} of {cand.numel()} elements never written "
                        f"(still the NaN prefill), first at {_where(unwritten)}", count=n)
    hp = torch.float64 if cand.dtype == torch.float64 else torch.float32
    c, o = cand.to(hp), orig.to(hp)
    c_nan, o_nan = torch.isnan(c), torch.isnan(o)
    extra_nan = c_nan & ~o_nan
    if bool(extra_nan.any()):
        n = int(extra_nan.sum())
        return Mismatch("nan", f"{name}: NaN in {n} elements where the original has none, first at "
                        f"{_where(extra_nan)}", count=n)
    lost_nan = o_nan & ~c_nan
    if bool(lost_nan.any()):
        return Mismatch("mismatch", f"{name}: the original gives NaN at {_where(lost_nan)}, the candidate "
                        f"{float(c[lost_nan][0])}", count=int(lost_nan.sum()))
    o_inf = torch.isinf(o) | torch.isinf(c)
    inf_bad = o_inf & (c != o)
    if bool(inf_bad.any()):
        return Mismatch("mismatch", f"{name}: infinity differs at {_where(inf_bad)} (candidate "
                        f"{float(c[inf_bad][0])}, original {float(o[inf_bad][0])})", count=int(inf_bad.sum()))
    finite = ~(o_nan | o_inf)
    abs_err, rel_err = _errors(c, o)
    bad = finite & ((c - o).abs() > tol.atol + tol.rtol * o.abs())
    if bool(bad.any()):
        return Mismatch("mismatch", f"{name}: {int(bad.sum())} of {c.numel()} elements outside atol={tol.atol} "
                        f"rtol={tol.rtol} of the original, first at {_where(bad)}", abs_err, rel_err, int(bad.sum()))
    if ref is not None:
        r = ref.to(device=c.device, dtype=torch.float64 if hp == torch.float64 else torch.float32)
        if r.shape != c.shape:
            r = r.reshape(c.shape)
        rf = finite & torch.isfinite(r)
        bound = tol.atol + tol.rtol * r.abs() + (o - r).abs()
        bad = rf & ((c - r).abs() > bound)
        if bool(bad.any()):
            a, rr = _errors(c, r)
            return Mismatch("mismatch", f"{name}: {int(bad.sum())} elements farther from the float reference "
                            f"than tolerance + the original's own error, first at {_where(bad)}", a, rr,
                            int(bad.sum()))
    return None


def max_errors(cand: torch.Tensor, orig: torch.Tensor) -> tuple[float, float]:
    hp = torch.float64 if cand.dtype == torch.float64 else torch.float32
    return _errors(cand.to(hp), orig.to(hp))


def compare_to_reference(name: str, out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> Optional[Mismatch]:
    """The original alone against the float reference (a finding about the extraction, not a candidate)."""
    hp = torch.float64 if out.dtype == torch.float64 else torch.float32
    o = out.to(hp)
    r = ref.to(device=o.device, dtype=hp).reshape(o.shape)
    both_nan = torch.isnan(o) & torch.isnan(r)
    same_inf = torch.isinf(o) & (o == r)
    bad = ~(both_nan | same_inf) & ~((o - r).abs() <= tol.atol + tol.rtol * r.abs())
    if bool(bad.any()):
        a, rr = _errors(o, r)
        return Mismatch("reference mismatch", f"{name}: {int(bad.sum())} of {o.numel()} elements outside "
                        f"atol={tol.atol} rtol={tol.rtol} of the reference, first at {_where(bad)}", a, rr,
                        int(bad.sum()))
    return None
