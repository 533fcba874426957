"""one_batch's prefill in groups of requests, merged into one decode batch, for shapes whose one-shot prefill does
not fit the card.

``sglang.benchmark.one_batch`` prefills the whole batch in one forward: batch x input tokens of activations beside
the static pool. Batch 32 at context 8160 (261k tokens) ran out of memory on an 80 GB H100 at every
``--mem-fraction-static`` that leaves the KV pool room for those tokens (2026-12-06). A server never does that: its
scheduler prefills under ``--chunked-prefill-size`` and merges the prefilled requests into its running batch
(``ScheduleBatch.merge_batch``), and then decodes them together. This does the same with one_batch's own pieces:
its bench runner's ``extend`` on each group of requests, the groups' batches merged the way the scheduler merges
them, the groups' next tokens concatenated in request order. The decode steps that follow are one_batch's own, on
the merged batch, so the decode step measured is that of the full batch; the prefill latency is the sum of the
groups' prefills.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def request_tokens(req: Any) -> int:
    """A request's prompt length (SGLang's ``Req.origin_input_ids``)."""
    return len(getattr(req, "origin_input_ids", None) or ())


def groups(reqs: Sequence[Any], max_tokens: int) -> list[list[Any]]:
    """Consecutive groups of at most ``max_tokens`` prompt tokens each; a request longer than that is a group of its
    own (one_batch gives every request the same length, so the groups are equal but the last)."""
    out: list[list[Any]] = []
    used = 0
    for r in reqs:
        n = request_tokens(r)
        if out and used + n <= max_tokens:
            out[-1].append(r)
            used += n
        else:
            out.append([r])
            used = n
    return out


class ChunkedPrefill:
    """one_batch's bench runner (``_TorchBenchRunner``) with ``extend`` in groups; every other attribute is the
    runner's own (``torch_runner``, ``decode``, ``clear``, ``synchronize``, ``max_batch_size``)."""

    def __init__(self, runner: Any, max_tokens: int):
        if max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, not {max_tokens}")
        self.runner = runner
        self.max_tokens = max_tokens
        self.last_groups: list[int] = []  # requests per group of the last extend (the run's own record)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runner, name)

    def extend(self, reqs: Sequence[Any]) -> tuple[Any, Any, Any]:
        parts = groups(reqs, self.max_tokens)
        self.last_groups = [len(g) for g in parts]
        if len(parts) <= 1:
            return self.runner.extend(reqs)
        import torch

        ids, logits, batch = [], [], None
        for g in parts:
            next_ids, next_logits, b = self.runner.extend(g)
            ids.append(next_ids)
            logits.append(next_logits)
            if batch is None:
                batch = b
            else:
                batch.merge_batch(b)  # the scheduler's merge of a prefilled batch into the running one
        merged_logits = None if any(x is None for x in logits) else torch.cat(logits)
        return torch.cat(ids), merged_logits, batch
