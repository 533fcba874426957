"""Host shared memory between the checker and the candidate worker: how arguments and outputs travel.

One anonymous memory file (``memfd``) per worker, made by the checker and inherited by the worker at start:
no name on any file system. The checker writes a case's guarded buffers (inputs, NaN-poisoned outputs, guard
bands) into it and describes them with a ``Layout``; the worker runs the candidate on views of those bytes
(on CUDA: on a device copy, written back whole, guards included), then the checker copies the bytes out
before it looks at them, so nothing the candidate leaves running can change what is checked.
"""

from __future__ import annotations

import mmap
import os
from typing import Any

import torch

from astra_sglang.harness.shared.protocol import BufferSpec, Layout
from astra_sglang.harness.shared.tensors import ArgSet, Guarded, torch_dtype

ALIGN = 4096


class Arena:
    def __init__(self, nbytes: int, fd: int = -1):
        self.nbytes = max(ALIGN, -(-nbytes // ALIGN) * ALIGN)
        if fd < 0:
            fd = os.memfd_create("astra-arena", 0)
            os.ftruncate(fd, self.nbytes)
        self.fd = fd
        self._map = mmap.mmap(fd, self.nbytes)
        self.host = torch.frombuffer(self._map, dtype=torch.uint8)
        self.pinned = False

    def pin(self) -> bool:
        """Page-lock the mapping for the CUDA driver (each process its own): copies to and from the device
        then run by DMA at full speed instead of through a staging buffer. Pageable copies still work."""
        if self.pinned or not torch.cuda.is_available():
            return self.pinned
        try:
            err = torch.cuda.cudart().cudaHostRegister(self.host.data_ptr(), self.nbytes, 0)
            self.pinned = int(err) == 0
        except Exception:  # noqa: BLE001 - an older torch or a driver that refuses: stay pageable
            self.pinned = False
        return self.pinned

    def close(self) -> None:
        del self.host
        try:
            self._map.close()
        except BufferError:  # a view is still alive somewhere; the mapping goes with the process
            pass
        os.close(self.fd)


def _raw(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.uint8)


def put(arena: Arena, a: ArgSet, base: int = 0) -> Layout:
    """Copy every guarded buffer of ``a`` (whole, guards included) into the arena from byte ``base`` on."""
    off = base
    specs = []
    for name, g in a.tensors.items():
        n = g.buf.numel() * g.buf.element_size()
        if off + n > arena.nbytes:
            raise ValueError(f"arena of {arena.nbytes} bytes too small for the case (needs {off + n})")
        arena.host[off:off + n].copy_(_raw(g.buf))
        specs.append(BufferSpec(name=name, offset=off, dtype=str(g.buf.dtype).removeprefix("torch."),
                                buf_numel=g.buf.numel(), start=g.start, shape=list(g.view.shape),
                                row_stride=g.row_stride))
        off += -(-n // ALIGN) * ALIGN
    return Layout(buffers=specs, scalars=dict(a.scalars), end=off)


def take(arena: Arena, layout: Layout, a: ArgSet) -> ArgSet:
    """A private copy of the arena's buffers, shaped like ``a`` (what the candidate left there)."""
    tensors = {}
    for s in layout.buffers:
        dt = torch_dtype(s.dtype)
        n = s.buf_numel * torch.empty((), dtype=dt).element_size()
        src = arena.host[s.offset:s.offset + n]
        buf = (src.to(a.device) if a.device == "cuda" else src.clone()).view(dt)  # a private snapshot
        tensors[s.name] = Guarded.over(buf, s.start, s.shape, s.row_stride)
    return ArgSet.from_tensors(a.manifest, a.dims, a.dtype, a.device, tensors, dict(a.scalars))


def views(region: torch.Tensor, layout: Layout) -> dict[str, Any]:
    """The kernel's arguments over ``region`` (the arena, or a device copy of its first ``layout.end`` bytes)."""
    args: dict[str, Any] = {}
    for s in layout.buffers:
        dt = torch_dtype(s.dtype)
        n = s.buf_numel * torch.empty((), dtype=dt).element_size()
        buf = region[s.offset:s.offset + n].view(dt)
        args[s.name] = Guarded.over(buf, s.start, s.shape, s.row_stride).view
    args.update(layout.scalars)
    return args
