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
Memoisation (identical inputs on every replay) is not closed by this: see docs/harness.md.
"""

from __future__ import annotations

import torch

from astra_sglang.checker import fill_poison
from astra_sglang.harness.shared.tensors import ArgSet
from astra_sglang.harness.shared.timing import Between, _Graph, _graph_ctx, _replay, _sync


class ReplayGuard:
    """The timing sets' output buffers: poisoned before each timed replay, one replay's kept on request."""

    def __init__(self, sets: list[ArgSet], outputs: list[str]) -> None:
        self.views = [[s.tensors[n].view for n in outputs] for s in sets]
        self.bufs = [[s.tensors[n].buf for n in outputs] for s in sets]
        self.outputs = outputs
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

    def between(self, replays: int, keep: int | None = None) -> Between:
        """For one batch of ``replays``: poison before each (never after the last: the outputs stay readable),
        and copy every set's buffers (guards included) after replay ``keep``."""
        self.kept = None

        def step(i: int) -> None:
            if keep is not None and i == keep + 1:
                self.kept = [[b.clone() for b in bufs] for bufs in self.bufs]
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
