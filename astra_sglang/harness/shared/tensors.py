"""Arguments of one check or timing run: guarded buffers, NaN-poisoned outputs, value distributions.

Every tensor lives in the middle of a larger allocation whose guard bands hold a NaN pattern: a write past
either end changes a guard (out-of-bounds write), and a read past the end of an input pulls in NaN. Outputs
start as the same NaN pattern, so an element the kernel never writes is visible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from astra_sglang.checker import fill_poison, is_poison
from astra_sglang.contract.op import Manifest, TensorArg
from astra_sglang.harness.shared.suite import distinct_refs, row_stride_of, shape_of, span, tensor_traffic
from astra_sglang.loader.launch import InputsFn, ScalarsFn

OpInputs = tuple[InputsFn | None, ScalarsFn | None]

GUARD_BYTES = 4096  # keeps the view 4 KiB-aligned inside a 512 B-aligned allocation

_FINITE_FILL = 1234.5  # the second prefill, to tell "never written" from "NaN propagated from the buffer"


def torch_dtype(name: str) -> torch.dtype:
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown torch dtype {name!r}")
    return dt


def arg_dtype(t: TensorArg, case_dtype: str) -> torch.dtype:
    return torch_dtype(case_dtype if t.dtype == "{dtype}" else t.dtype)


@dataclass
class Guarded:
    """A tensor view in the middle of ``buf`` (same dtype); everything outside the view holds the poison.

    With ``row_stride`` the view is row-strided, as SGLang passes some inputs (LLaMA's q: a view of the fused qkv
    projection's rows, the k and v columns between its rows): its first dim steps ``row_stride`` elements, the
    gaps between rows hold the poison too, and a kernel that writes there (into what would be SGLang's k and v)
    breaks the guards like one writing past the ends."""

    buf: torch.Tensor
    view: torch.Tensor
    start: int
    numel: int  # elements from start to the view's end (the rows' span, gaps included)
    row_stride: int | None = None

    @staticmethod
    def alloc(shape: tuple[int, ...], dtype: torch.dtype, device: str, row_stride: int | None = None) -> Guarded:
        elem = torch.empty((), dtype=dtype).element_size()
        guard = GUARD_BYTES // elem
        numel = span(shape, row_stride)
        body = -(-numel * elem // 16) * 16 // elem
        buf = torch.empty(2 * guard + body, dtype=dtype, device=device)
        fill_poison(buf)
        return Guarded.over(buf, guard, shape, row_stride)

    @staticmethod
    def over(buf: torch.Tensor, start: int, shape: tuple[int, ...] | list[int],
             row_stride: int | None = None) -> Guarded:
        """The guarded view of ``shape`` at element ``start`` of ``buf`` (an existing buffer: the arena's)."""
        shape = tuple(shape)
        numel = span(shape, row_stride)
        if row_stride is None:
            return Guarded(buf, buf[start:start + numel].view(shape), start, numel)
        rows = buf[start:start + numel].view(shape[0], row_stride)
        return Guarded(buf, rows[:, :math.prod(shape[1:])].unflatten(1, shape[1:]), start, numel, row_stride)

    def guards_intact(self) -> bool:
        outside = torch.cat([self.buf[: self.start], self.buf[self.start + self.numel:]])
        if self.row_stride is not None and self.numel:
            row = math.prod(self.view.shape[1:])
            gaps = self.buf[self.start:self.start + self.numel].view(-1, self.row_stride)[:, row:]
            outside = torch.cat([outside, gaps.reshape(-1)])
        return bool(is_poison(outside).all())


def fill_values(x: torch.Tensor, dist: str, gen: torch.Generator, special: list[str]) -> None:
    """Draw ``x`` in place from one value distribution (float tensors; ints get small non-negative values)."""
    if not x.dtype.is_floating_point:
        x.copy_(torch.randint(0, 16, x.shape, generator=gen, device=x.device, dtype=torch.int64).to(x.dtype))
        return
    if dist == "zeros":
        x.zero_()
        return
    v = torch.randn(x.shape, generator=gen, device=x.device, dtype=torch.float32)
    if dist == "wide":
        v = v * torch.pow(10.0, torch.empty_like(v).uniform_(-3.0, 3.0, generator=gen))
    elif dist == "tiny":
        v = v * 1e-3
    if dist == "special" and special and v.numel():
        values = torch.tensor([_special(s) for s in special], dtype=torch.float32, device=x.device)
        mask = torch.rand(v.shape, generator=gen, device=x.device) < 0.15
        pick = torch.randint(0, len(special), v.shape, generator=gen, device=x.device)
        v = torch.where(mask, values[pick], v)
    x.copy_(v.to(x.dtype))


def _special(s: str) -> float:
    named = {"+inf": math.inf, "inf": math.inf, "-inf": -math.inf, "nan": math.nan, "-0": -0.0, "+0": 0.0}
    key = s.strip().lower()
    return named[key] if key in named else float(key)


class ArgSet:
    """One set of arguments for the op: guarded tensors by name plus scalars."""

    def __init__(self, manifest: Manifest, dims: dict[str, int], dtype: str, device: str,
                 inputs: OpInputs = (None, None)):
        self.manifest = manifest
        self.dims = dims
        self.dtype = dtype
        self.device = device
        self.make_inputs = inputs[0]
        self.tensors: dict[str, Guarded] = {}
        for t in manifest.signature.tensors:
            stride = row_stride_of(manifest, t, dims)
            self.tensors[t.name] = Guarded.alloc(shape_of(t.shape, dims), arg_dtype(t, dtype), device, stride)
        self.scalars: dict[str, Any] = {s.name: s.default for s in manifest.signature.scalars}
        if inputs[1] is not None:
            derived = inputs[1](dict(dims), dtype)
            unknown = sorted(set(derived) - set(self.scalars))
            if unknown:
                raise ValueError(f"inputs.py scalars() returned {unknown}, not scalars of the signature")
            self.scalars.update(derived)

    @classmethod
    def from_tensors(cls, manifest: Manifest, dims: dict[str, int], dtype: str, device: str,
                     tensors: dict[str, Guarded], scalars: dict[str, Any]) -> ArgSet:
        """An argument set over buffers that already exist (e.g. copied out of the shared arena)."""
        a = cls.__new__(cls)
        a.manifest, a.dims, a.dtype, a.device, a.tensors, a.scalars = manifest, dims, dtype, device, tensors, scalars
        a.make_inputs = None
        return a

    def args(self) -> dict[str, Any]:
        out: dict[str, Any] = {n: g.view for n, g in self.tensors.items()}
        out.update(self.scalars)
        return out

    def fill(self, dist: str, gen: torch.Generator, values: dict[str, torch.Tensor] | None = None) -> None:
        """Inputs (and in-place args) get fresh values, or copies of ``values``; outputs get the NaN poison.

        Generated tensors (index and metadata tensors) come from the op's inputs.py, drawn before the others
        from the same generator, so one seed reproduces the whole argument set."""
        made = self._generated(gen) if values is None else {}
        for t in self.manifest.signature.tensors:
            g = self.tensors[t.name]
            if t.role == "output":
                fill_poison(g.view)
            elif values is not None:
                g.view.copy_(values[t.name])
            elif t.generated:
                g.view.copy_(made[t.name])
            else:
                fill_values(g.view, dist, gen, t.special_values)

    def _generated(self, gen: torch.Generator) -> dict[str, torch.Tensor]:
        names = [t.name for t in self.manifest.signature.tensors if t.generated and t.role != "output"]
        if not names:
            return {}
        if self.make_inputs is None:
            raise ValueError(f"{self.manifest.short_name}: {names} are generated but the op has no inputs.py")
        made = self.make_inputs(dict(self.dims), self.dtype, gen, self.device)
        for name in names:
            want = tuple(self.tensors[name].view.shape)
            got = made.get(name)
            if not isinstance(got, torch.Tensor) or tuple(got.shape) != want:
                shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
                raise ValueError(f"{self.manifest.short_name}: inputs.py gave {name!r} as {shape}, the signature "
                                 f"says {want} for {self.dims}")
        return made

    def fill_outputs(self, finite: bool = False) -> None:
        for t in self.manifest.signature.tensors:
            if t.role == "output":
                g = self.tensors[t.name]
                if finite and g.view.dtype.is_floating_point:  # float8_e4m3fn tops out at 448
                    g.view.fill_(min(_FINITE_FILL, torch.finfo(g.view.dtype).max))
                else:
                    fill_poison(g.view)

    def values(self) -> dict[str, torch.Tensor]:
        """Copies of the input/in-place values (the pristine state to restore or compare)."""
        return {t.name: self.tensors[t.name].view.clone() for t in self.manifest.signature.tensors if t.role != "output"}

    def bytes_moved(self, gen: torch.Generator | None = None) -> int:
        """Minimum traffic: inputs read once, outputs written once, in-place args both. A ``moved`` shape that
        counts drawn values (``distinct(topk_ids)``: the experts a MoE GEMM's routing touched) counts them on the
        generated tensors ``gen`` draws (seeded as a timing set is, the same routing); without ``gen`` it raises
        ``NeedsValues``: the set's own buffers may hold only the poison of an unfilled probe."""
        distinct = self._distinct_counts(gen)
        total = 0
        for t in self.manifest.signature.tensors:
            v = self.tensors[t.name].view
            n = math.prod(shape_of(t.moved, self.dims, distinct)) if t.moved is not None else v.numel()
            total += tensor_traffic(t.role, n * v.element_size())
        return total

    def _distinct_counts(self, gen: torch.Generator | None) -> dict[str, int] | None:
        names = set().union(*(distinct_refs(t.moved) for t in self.manifest.signature.tensors))
        if not names or gen is None:
            return None
        made = self._generated(gen)
        return {n: int(torch.unique(made[n]).numel()) for n in names}

    def nbytes(self) -> int:
        return sum(g.buf.numel() * g.buf.element_size() for g in self.tensors.values())
