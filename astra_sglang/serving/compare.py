"""Token-by-token comparison of two servers' greedy completions of the same prompts.

Logprobs are compared only on the common prefix: after the first differing token the two sequences condition
on different text, and their logprobs say nothing about the kernels any more.
"""

from __future__ import annotations

from pydantic import Field

from astra_sglang.contract.base import Model
from astra_sglang.serving.client import Completion


class PromptComparison(Model):
    index: int
    tokens_a: int
    tokens_b: int
    first_divergence: int | None = Field(description="first token index where the two differ; None if identical")
    max_abs_logprob_diff: float = Field(description="over the common prefix")


class Agreement(Model):
    prompts: int
    identical_prompts: int
    identical_rate: float = Field(description="share of prompts whose completions are identical token for token")
    token_agreement: float = Field(description="tokens before the first divergence over all tokens compared")
    max_abs_logprob_diff: float
    per_prompt: list[PromptComparison]


def compare_one(index: int, a: Completion, b: Completion) -> PromptComparison:
    common = min(len(a.token_ids), len(b.token_ids))
    first = next((i for i in range(common) if a.token_ids[i] != b.token_ids[i]), None)
    if first is None and len(a.token_ids) != len(b.token_ids):
        first = common
    prefix = common if first is None else first
    diffs = [abs(x - y) for x, y in zip(a.logprobs[:prefix], b.logprobs[:prefix], strict=False)
             if x is not None and y is not None]
    return PromptComparison(index=index, tokens_a=len(a.token_ids), tokens_b=len(b.token_ids),
                            first_divergence=first, max_abs_logprob_diff=max(diffs, default=0.0))


def compare(a: list[Completion], b: list[Completion]) -> Agreement:
    if len(a) != len(b):
        raise ValueError(f"{len(a)} completions against {len(b)}")
    rows = [compare_one(i, x, y) for i, (x, y) in enumerate(zip(a, b, strict=True))]
    same = sum(r.first_divergence is None for r in rows)
    total = sum(max(r.tokens_a, r.tokens_b) for r in rows)
    agreed = sum(r.tokens_a if r.first_divergence is None else r.first_divergence for r in rows)
    return Agreement(prompts=len(rows), identical_prompts=same, identical_rate=same / len(rows) if rows else 1.0,
                     token_agreement=agreed / total if total else 1.0,
                     max_abs_logprob_diff=max((r.max_abs_logprob_diff for r in rows), default=0.0), per_prompt=rows)
