"""The one correctness checker: is a kernel's output the original's function? Used by the harness verdict and by
the plugin's first-call gate in SGLang's server, with the op manifest's tolerances, so a patch is accepted in the
server by the same test it passed in the harness.

Rules, in order: an element still holding the NaN poison was never written; NaN where the original has none
fails; where the original is NaN or +-inf the candidate must be the same; finite elements must be within the
dtype's tolerance of the original (|c - o| <= atol + rtol |o|) and within tolerance of the float32/float64
reference, allowing the original's own distance to it (|c - r| <= atol + rtol |r| + |o - r|).

Imports only torch and the contract: it runs inside every SGLang process that activates a patch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from astra_sglang.contract.op import Tolerance

# Quiet NaNs with a payload no arithmetic produces by itself: outputs are prefilled with them, so an element a
# kernel never writes is visible.
# float8_e4m3fn has a single NaN pattern (S.1111.111), so its poison is that NaN: an element a kernel sets to NaN
# there reads as unwritten, which fails the same way unless the original is NaN there too.
_NAN_BITS = {torch.float32: 0x7FD5A5A5, torch.float16: 0x7ED5, torch.bfloat16: 0x7FD5, torch.float64: 0x7FFAA5A5A5A5A5A5,
             torch.float8_e4m3fn: 0x7F, torch.float8_e5m2: 0x7E}
# Mantissa bits of the float8 formats. One unit in their last place (12.5% / 25% relative) is coarser than any
# case dtype's tolerance, and two valid kernels whose scales differ in the last float32 bit round a value near
# an fp8 midpoint to neighbouring codes: a float8 output is allowed one ulp at the value compared to.
_FP8_MANTISSA = {torch.float8_e4m3fn: 3, torch.float8_e5m2: 2}
_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(x: torch.Tensor) -> torch.Tensor:
    """The raw bits, so NaN == NaN and -0 != +0 where it matters."""
    if x.dtype == torch.bool:
        return x.view(torch.uint8)
    return x.contiguous().view(_INT_VIEW[x.element_size()])


def poison_value(dtype: torch.dtype) -> int | None:
    return _NAN_BITS.get(dtype)


def fill_poison(x: torch.Tensor) -> None:
    pattern = poison_value(x.dtype)
    if pattern is None:  # integer/bool tensors: a value that is at least unusual
        if x.dtype == torch.bool:
            x.fill_(True)
        else:
            x.fill_(-0x55 if x.dtype.is_signed else 0x55)
        return
    iv = _INT_VIEW[x.element_size()]
    info = torch.iinfo(iv)
    signed = pattern - (1 << (8 * x.element_size())) if pattern > info.max else pattern
    x.view(iv).fill_(signed)


def is_poison(x: torch.Tensor) -> torch.Tensor:
    ref = torch.empty((1,), dtype=x.dtype, device=x.device)
    fill_poison(ref)
    return bits(x) == bits(ref)


@dataclass
class Mismatch:
    reason: str
    detail: str
    max_abs_err: float | None = None
    max_rel_err: float | None = None
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


def scale_key(name: str) -> str:
    """Key under which a reference may return the magnitude each element's rounding error scales with.

    Element-wise ``rtol * |x|`` rejects correct kernels wherever the op cancels (merge_state mixes values of
    +-1e3 into results near 0: any valid arithmetic order moves those by ``eps * 1e3``). A reference that knows
    the size of the terms it sums returns them under this key, and the relative bound uses ``max(|x|, scale)``.
    """
    return f"{name}:scale"


def segments_key(name: str) -> str:
    """Key under which a reference may say which elements of an output the op orders, and which it defines.

    An int tensor shaped like the output: elements with the same non-negative id form a segment whose order
    the op leaves undefined (moe_align's token ids within one expert, written by atomics), so both sides are
    compared as sorted multisets per segment; a negative id marks an element the op does not define at all (a
    scratch buffer), never compared. Without it every element is compared in place.
    """
    return f"{name}:segments"


def canonical(x: torch.Tensor, segments: torch.Tensor | None) -> torch.Tensor:
    """``x`` with its values sorted ascending within each segment (positions of a segment kept) and undefined
    elements zeroed: the form in which two valid outputs of an op with segments are equal."""
    if segments is None:
        return x
    seg = segments.to(device=x.device, dtype=torch.int64).reshape(-1)
    flat = x.reshape(-1)
    if seg.numel() != flat.numel():
        raise ValueError(f"segments of {seg.numel()} elements for an output of {flat.numel()}")
    flat = torch.where(seg < 0, torch.zeros_like(flat), flat)
    by_value = torch.argsort(flat, stable=True)
    order = by_value[torch.argsort(seg[by_value], stable=True)]
    out = torch.empty_like(flat)
    out[torch.argsort(seg, stable=True)] = flat[order]
    return out.reshape(x.shape)


def _ulp_floor(bound: torch.Tensor, at: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``bound``, but at least one ulp of a float8 ``dtype`` at ``|at|`` (see _FP8_MANTISSA)."""
    bits = _FP8_MANTISSA.get(dtype)
    if bits is None:
        return bound
    tiny = torch.finfo(dtype).smallest_normal
    ulp = torch.exp2(torch.floor(torch.log2(at.abs().clamp_min(tiny).nan_to_num(tiny, posinf=tiny))) - bits)
    return torch.maximum(bound, ulp)


def _magnitude(x: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    if scale is None:
        return x.abs()
    return torch.maximum(x.abs(), scale.to(device=x.device, dtype=x.dtype).reshape(x.shape).abs())


def _as_output(ref: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """The exact reference as the output dtype can hold it, in the comparison precision.

    A float32 reference above 65504 is inf in a float16 output (found on the H200: SGLang's own silu_and_mul
    'failed' its float16 check on wide inputs only because the reference had not overflowed); rounding the
    reference once into the output dtype gives the best answer a kernel could store, overflow included.
    """
    hp = torch.float64 if out.dtype == torch.float64 else torch.float32
    r = ref.to(device=out.device)
    if out.dtype.is_floating_point and out.dtype.itemsize < r.dtype.itemsize:
        r = r.to(out.dtype)
    return r.to(hp)


def compare(name: str, cand: torch.Tensor, orig: torch.Tensor, ref: torch.Tensor | None,
            tol: Tolerance, scale: torch.Tensor | None = None,
            segments: torch.Tensor | None = None) -> Mismatch | None:
    if cand.shape != orig.shape:
        return Mismatch("mismatch", f"{name}: shape {tuple(cand.shape)} != original {tuple(orig.shape)}")
    cand, orig = canonical(cand, segments), canonical(orig, segments)
    if ref is not None and segments is not None:
        ref = canonical(ref.to(cand.device).reshape(cand.shape), segments)
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
    bad = finite & ((c - o).abs() > _ulp_floor(tol.atol + tol.rtol * _magnitude(o, scale), o, cand.dtype))
    if bool(bad.any()):
        return Mismatch("mismatch", f"{name}: {int(bad.sum())} of {c.numel()} elements outside atol={tol.atol} "
                        f"rtol={tol.rtol} of the original, first at {_where(bad)}", abs_err, rel_err, int(bad.sum()))
    if ref is not None:
        r = _as_output(ref, cand).reshape(c.shape)
        rf = finite & torch.isfinite(r)
        bound = _ulp_floor(tol.atol + tol.rtol * _magnitude(r, scale), r, cand.dtype) + (o - r).abs()
        bad = rf & ((c - r).abs() > bound)
        if bool(bad.any()):
            a, rr = _errors(c, r)
            return Mismatch("mismatch", f"{name}: {int(bad.sum())} elements farther from the float reference "
                            f"than tolerance + the original's own error, first at {_where(bad)}", a, rr,
                            int(bad.sum()))
    return None


def compare_outputs(got: dict[str, torch.Tensor], orig: dict[str, torch.Tensor],
                    ref: dict[str, torch.Tensor], tol: Tolerance) -> Mismatch | None:
    """The first output (by the original's names) where the kernel's differs; ``ref`` may hold ``name:scale``."""
    for name, o in orig.items():
        m = compare(name, got[name], o, ref.get(name), tol, ref.get(scale_key(name)), ref.get(segments_key(name)))
        if m is not None:
            return m
    return None


def _against_reference(out: torch.Tensor, ref: torch.Tensor,
                       segments: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The output and the reference, both canonical under ``segments``, in the comparison precision."""
    hp = torch.float64 if out.dtype == torch.float64 else torch.float32
    r = _as_output(ref, out).reshape(out.shape)
    return canonical(out.to(hp), segments), canonical(r, segments)


def tolerance_used(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance,
                   scale: torch.Tensor | None = None, segments: torch.Tensor | None = None) -> tuple[float, float]:
    """(max |out - ref|, max of |out - ref| / (atol + rtol*|ref|)) over finite elements: how much of its
    tolerance an implementation uses, the number a contract's validation records (1.0 = at the limit)."""
    o, r = _against_reference(out, ref, segments)
    fin = torch.isfinite(o) & torch.isfinite(r)
    if not bool(fin.any()):
        return 0.0, 0.0
    err = (o - r).abs()[fin]
    bound = _ulp_floor(tol.atol + tol.rtol * _magnitude(r, scale), r, out.dtype)[fin]
    ratio = torch.where(err == 0, torch.zeros_like(err), err / bound)
    return float(err.max()), float(ratio.max())


def compare_to_reference(name: str, out: torch.Tensor, ref: torch.Tensor, tol: Tolerance,
                         scale: torch.Tensor | None = None, segments: torch.Tensor | None = None) -> Mismatch | None:
    """The original alone against the float reference (a finding about the extraction, not a candidate)."""
    o, r = _against_reference(out, ref, segments)
    both_nan = torch.isnan(o) & torch.isnan(r)
    same_inf = torch.isinf(o) & (o == r)
    bound = _ulp_floor(tol.atol + tol.rtol * _magnitude(r, scale), r, out.dtype)
    bad = ~(both_nan | same_inf) & ~((o - r).abs() <= bound)
    if bool(bad.any()):
        a, rr = _errors(o, r)
        return Mismatch("reference mismatch", f"{name}: {int(bad.sum())} of {o.numel()} elements outside "
                        f"atol={tol.atol} rtol={tol.rtol} of the reference, first at {_where(bad)}", a, rr,
                        int(bad.sum()))
    return None
