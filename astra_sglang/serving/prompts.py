"""The prompts both servers get: a built-in set, or the user's file (JSONL or a JSON list).

The built-in set mixes short prompts (decode-dominated) with long ones, because a patch guarded on a token
count (a norm over 128..512 rows, say) is only reached when a prefill batch has that many tokens.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from pydantic import Field, ValidationError

from astra_sglang.contract.base import Model, validation_reason
from astra_sglang.errors import AstraError


class Prompt(Model):
    prompt: str | list[int] = Field(description="text, or token ids for a server started with --skip-tokenizer-init")
    max_tokens: int | None = Field(default=None, ge=1, description="overrides --max-tokens for this prompt")


_SHORT = [
    "The capital of France is",
    "def fibonacci(n):",
    "List three prime numbers:",
    "Once upon a time, in a quiet village by the sea,",
    "Q: What is 17 times 23?\nA:",
    "Translate to German: The weather is nice today.",
]
_SENTENCES = [
    "The scheduler batches requests so that the GPU stays busy while tokens stream back to clients.",
    "Each layer normalizes its input, attends over the cached keys and values, and mixes the result.",
    "A kernel that reads every byte once and writes every byte once is bound by memory bandwidth.",
    "When two kernels compute the same function in a different order, rounding can differ in the last bit.",
    "Operators watch throughput, latency and the share of requests that finish without an error.",
    "The radix cache keeps shared prefixes, so a second request with the same system prompt starts sooner.",
]


def _long(n_sentences: int, seed: int) -> str:
    """A deterministic paragraph: sentences in an order set by the seed modulo 6, numbered; distinct for the six
    seeds of the built-in set (``synthetic_prompts``, which needs more, uses ``_distinct``)."""
    parts = [f"({i + 1}) {_SENTENCES[(seed * 7 + i * 5) % len(_SENTENCES)]}" for i in range(n_sentences)]
    return " ".join(parts) + " In summary,"


def builtin_prompts() -> list[Prompt]:
    longs = [_long(n, seed) for seed, n in enumerate((6, 12, 20, 28, 40, 56))]
    return [Prompt(prompt=p) for p in _SHORT + longs]


def synthetic_prompts(spec: str) -> list[Prompt]:
    """``COUNT:TOKENS``: COUNT distinct prompts of at most about TOKENS tokens each (deterministic text: a numbered
    sentence is 17 words, about 22 tokens with a LLaMA-3-style tokenizer, counted as 24 so that a prompt sized to
    a context stays inside it), for a context length the built-in set never reaches (decode attention at 8192)."""
    try:
        count, tokens = (int(x) for x in spec.split(":"))
    except ValueError:
        raise AstraError(f"--synthetic-prompts {spec!r}: expected COUNT:TOKENS, e.g. 128:1024") from None
    if count < 1 or tokens < 8:
        raise AstraError(f"--synthetic-prompts {spec!r}: need COUNT >= 1 and TOKENS >= 8")
    return [Prompt(prompt=_distinct(max(1, tokens // 24), seed)) for seed in range(count)]


def _distinct(n_sentences: int, seed: int) -> str:
    """A paragraph of its own for every seed: its number first, then sentences drawn by a seed's generator.
    ``_long``'s order depends on the seed modulo 6 only, so 128 synthetic prompts were 6 texts, each sent about 21
    times (validate on the H100, 2026-12-06: the 61 divergences were a few near ties, repeated every 6 prompts)."""
    rng = random.Random(seed)
    parts = [f"({i + 1}) {rng.choice(_SENTENCES)}" for i in range(n_sentences)]
    return f"Note {seed + 1}. " + " ".join(parts) + " In summary,"


def load_prompts(path: Path) -> list[Prompt]:
    """``path``: JSON lines of ``{"prompt": ..., "max_tokens": ...}`` (or of bare strings), or one JSON list."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise AstraError(f"cannot read the prompt file {path}: {e.strerror}") from None
    try:
        stripped = text.lstrip()
        rows = json.loads(text) if stripped.startswith("[") else [json.loads(x) for x in text.splitlines() if x.strip()]
    except json.JSONDecodeError as e:
        raise AstraError(f"{path}: not JSON lines or a JSON list (line {e.lineno}: {e.msg})") from None
    prompts = []
    for i, row in enumerate(rows):
        try:
            prompts.append(Prompt(prompt=row) if isinstance(row, str) else Prompt.model_validate(row))
        except ValidationError as e:
            raise AstraError(f"{path}: prompt {i + 1}: {validation_reason(e)}") from None
    if not prompts:
        raise AstraError(f"{path}: no prompts")
    return prompts
