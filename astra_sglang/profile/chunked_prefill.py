"""one_batch's prefill in groups of requests, merged into one decode batch, for shapes whose one-shot prefill does
not fit the card.

``sglang.benchmark.one_batch`` prefills the whole batch in one forward: batch x input tokens of activations beside
the static pool. Batch 32 at context 8160 (261k tokens) ran out of memory on an 80 GB H100 at every
``--mem-fraction-static`` that leaves the KV pool room for those tokens (2026-12-06). A server never does that: its
scheduler prefills under ``--chunked-prefill-size`` and merges the prefilled requests into its running batch
(``ScheduleBatch.merge_batch``), and then decodes them together. This does the same with one_batch's own pieces:
its bench runner's ``extend`` (``_TorchBenchRunner.extend(self, reqs)``) on each group of requests, the groups'
batches merged the way the scheduler merges them, the groups' next tokens concatenated in request order. The decode
steps that follow are one_batch's own, on the merged batch, so the decode step measured is that of the full batch;
the prefill latency one_batch reports is the sum of the groups' prefills.

Both forwards read it from the environment: the one_batch child of ``profile`` and the cross-process ``e2e``, and
the in-process e2e child.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

ENV_PREFILL_TOKENS = "ASTRA_PREFILL_CHUNK_TOKENS"  # > 0: one_batch's prefill in groups of at most that many tokens
GROUPS_ATTR = "astra_prefill_groups"  # on the bench runner: requests per group of its last extend
RUNNER_CLASS = "_TorchBenchRunner"  # one_batch's runner (SGLang 0.5.23): extend(self, reqs) -> (ids, logits, batch)


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


def grouped_extend(extend: Callable[[Sequence[Any]], tuple[Any, Any, Any]], reqs: Sequence[Any],
                   max_tokens: int) -> tuple[Any, Any, Any, list[int]]:
    """``extend`` on each group, the batches merged: (next token ids, next-token logits or None, the merged batch,
    requests per group)."""
    parts = groups(reqs, max_tokens)
    sizes = [len(g) for g in parts]
    if len(parts) <= 1:
        return (*extend(reqs), sizes)
    import torch

    ids, logits, batch = [], [], None
    for g in parts:
        next_ids, next_logits, b = extend(g)
        ids.append(next_ids)
        logits.append(next_logits)
        if batch is None:
            batch = b
        else:
            batch.merge_batch(b)  # the scheduler's merge of a prefilled batch into the running one
    merged_logits = None if any(x is None for x in logits) else torch.cat(logits)
    return torch.cat(ids), merged_logits, batch, sizes


def chunk_prefill(one_batch: ModuleType | Any, max_tokens: int) -> None:
    """one_batch's bench runner prefills in groups from now on (every instance: the class's ``extend`` is
    replaced); once only. A one_batch without that runner is another SGLang: said, never guessed around."""
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be positive, not {max_tokens}")
    cls = getattr(one_batch, RUNNER_CLASS, None)
    original = getattr(cls, "extend", None)
    if cls is None or original is None:
        raise RuntimeError(f"{ENV_PREFILL_TOKENS}: this SGLang's one_batch has no {RUNNER_CLASS}.extend (written for "
                           "SGLang 0.5.23); run without chunked prefill")
    if getattr(original, "astra_chunked", False):
        return

    def extend(self: Any, reqs: Sequence[Any]) -> tuple[Any, Any, Any]:
        ids, logits, batch, sizes = grouped_extend(lambda g: original(self, g), reqs, max_tokens)
        setattr(self, GROUPS_ATTR, sizes)
        return ids, logits, batch

    extend.astra_chunked = True  # type: ignore[attr-defined]
    cls.extend = extend


def child_env(tokens: int) -> dict[str, str]:
    """What a one_batch child's environment gets for ``tokens`` (nothing for 0): ``tokens_from_env`` reads it."""
    return {ENV_PREFILL_TOKENS: str(tokens)} if tokens else {}


def tokens_from_env() -> int:
    """The group size the parent asked for (0: one forward, one_batch's way)."""
    raw = os.environ.get(ENV_PREFILL_TOKENS, "").strip()
    try:
        return max(0, int(raw)) if raw else 0
    except ValueError:
        raise RuntimeError(f"{ENV_PREFILL_TOKENS}={raw!r} is not a number of tokens") from None
