"""Every timed replay must compute the function, not only the one re-checked after timing (issue 22, class 1).

A kernel can tell timed CUDA-graph replays from checked calls (stream capture state, back-to-back launches seen
through ``%globaltimer``, the timing sets' own buffers) and do less work there. Two things close that, on both
sides of the timing alike so that neither is favoured:

- before every timed replay, the output buffers of every timing set are re-poisoned (NaN), outside the timed
  window: a replay that skips work on any set leaves poison there;
- the judge picks one replay of each batch of the candidate's, and one timing set, at random from its own
  secret; the worker keeps that replay's outputs (a copy made after the replay's end event, outside the window)
  and hands the chosen set to the judge, which compares it with the original's output for the same arguments
  and checks its guard bands.

The choice of replay is sent with the batch, but only the kernel's behaviour matters here: a kernel sees its
replay run and cannot know whether the copy after it will be kept, and the set is named after the batch ended.

Memoisation by value (issue 22, class 2: a kernel that fingerprints a few input elements and, on a match, copies
outputs it kept instead of computing) would pass both, since every replay sees the same inputs. So before the
kept replay the worker's trusted code moves a window of every perturbable input (floating, not made by the op's
inputs.py, contiguous) to another place of the same tensor, from a seed the judge chose and the kernel never
sees, and puts it back right after: the inputs of that one replay differ from every other's where no sparse
fingerprint is likely to look, and the judge checks it on the same moved values (``perturb``). Moving values
inside a tensor keeps them in its distribution; one window per batch of 25 replays leaves the timing alone.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from astra_sglang.checker import fill_poison
from astra_sglang.harness.shared.tensors import ArgSet
from astra_sglang.harness.shared.timing import Between, _Graph, _graph_ctx, _replay, _sync

WINDOW = 64  # a moved window holds 1/WINDOW of a tensor's elements


def perturbable(arg_set: ArgSet) -> list[str]:
    """The inputs a replay's perturbation may move values in: floating, filled by the harness (a tensor made
    by the op's inputs.py may carry structure, e.g. sorted indices or a layout, that moving values would break)."""
    return [t.name for t in arg_set.manifest.signature.tensors
            if t.role == "input" and not t.generated and arg_set.tensors[t.name].view.is_floating_point()
            and (arg_set.tensors[t.name].view.is_contiguous() or arg_set.tensors[t.name].row_stride is not None)
            and arg_set.tensors[t.name].view.numel() >= 2]


def _elements(view: torch.Tensor) -> torch.Tensor:
    """A view of ``view``'s elements in row-major order that writes go through: flat for a contiguous tensor,
    [rows, row elements] for a row-strided one (its rows are contiguous; the gaps between them are not its)."""
    return view.view(-1) if view.is_contiguous() else view.flatten(1)


def _window(t: torch.Tensor, start: int, length: int) -> tuple[Any, ...] | slice:
    """Index of elements ``start .. start + length`` (row-major) of ``_elements``' view."""
    if t.dim() == 1:
        return slice(start, start + length)
    pos = torch.arange(start, start + length, device=t.device)
    return (pos // t.shape[1], pos % t.shape[1])


def _move_window(t: torch.Tensor, seed: int, set_index: int, name: str) -> tuple[Any, torch.Tensor]:
    """Move one window of ``t`` (an ``_elements`` view; 1/WINDOW of it) to another place in it, in place, as
    ``seed`` draws it for that tensor of that timing set; returns the destination and the values it held (to put
    back). The worker and the judge both move through here, so the judge checks exactly the values the kept replay
    ran on (the judge's dense copy and the worker's row-strided view count elements in the same row-major order)."""
    numel = t.numel()
    rng = random.Random(f"{seed}:{set_index}:{name}")
    length = max(1, numel // WINDOW)
    dst = rng.randrange(numel - length + 1)
    src = rng.randrange(numel - length + 1)
    if src == dst:
        src = (dst + length) % (numel - length + 1)
    at = _window(t, dst, length)
    saved = t[at].clone()
    t[at] = t[_window(t, src, length)].clone()
    return at, saved


def perturb(values: dict[str, torch.Tensor], names: list[str], seed: int, set_index: int) -> dict[str, torch.Tensor]:
    """The judge's copy of what the worker's perturbation makes of timing set ``set_index`` (new tensors)."""
    out = dict(values)
    for name in names:
        out[name] = values[name].clone()
        _move_window(out[name].view(-1), seed, set_index, name)
    return out


class ReplayGuard:
    """The timing sets' output buffers: poisoned before each timed replay, one replay's kept on request, its
    perturbable inputs moved for that replay only."""

    def __init__(self, sets: list[ArgSet], outputs: list[str]) -> None:
        self.views = [[s.tensors[n].view for n in outputs] for s in sets]
        self.bufs = [[s.tensors[n].buf for n in outputs] for s in sets]
        self.outputs = outputs
        names = perturbable(sets[0]) if sets else []
        self.inputs = [[(n, _elements(s.tensors[n].view)) for n in names] for s in sets]
        self._saved: list[tuple[torch.Tensor, Any, torch.Tensor]] = []
        self.kept: list[list[torch.Tensor]] | None = None
        self._graph = None
        if any(v.is_cuda for views in self.views for v in views):  # one graph: hundreds of fills, one launch
            _sync()
            g = _Graph()
            with _graph_ctx(g):
                self._poison()
            _sync()
            self._graph = g

    def _poison(self) -> None:
        for views in self.views:
            for v in views:
                fill_poison(v)

    def _move(self, seed: int) -> None:
        for index, tensors in enumerate(self.inputs):
            for name, t in tensors:
                self._saved.append((t, *_move_window(t, seed, index, name)))

    def _restore(self) -> None:
        for t, at, saved in reversed(self._saved):
            t[at] = saved
        self._saved = []

    def between(self, replays: int, keep: int | None = None, seed: int | None = None) -> Between:
        """For one batch of ``replays``: poison before each (never after the last: the outputs stay readable),
        and copy every set's buffers (guards included) after replay ``keep``; with ``seed``, replay ``keep``
        alone runs on inputs with a window moved (``perturb``), put back before the next replay."""
        self.kept = None

        def step(i: int) -> None:
            if keep is not None and i == keep + 1:
                self.kept = [[b.clone() for b in bufs] for bufs in self.bufs]
                self._restore()
            if keep is not None and seed is not None and i == keep:
                self._move(seed)
            if i < replays:
                if self._graph is not None:
                    _replay(self._graph)
                else:
                    self._poison()
        return step


def _watch() -> None:
    """The worker's tripwire covers this module and the poison it writes (a candidate that made the poison a
    no-op would leave the previous replay's outputs for a skipped one)."""
    import sys

    from astra_sglang import checker
    from astra_sglang.harness.shared import timing

    timing.watch_code(sys.modules[__name__])
    timing.watch_code(checker)


_watch()
