"""Representative shapes from real model configs, so a kernel is tuned for what SGLang actually serves.

Numbers are the models' published configs (hidden_size, intermediate_size, attention heads, KV heads,
head_dim). Tensor parallelism splits the MLP width and the head counts; the residual/norm width is not split.
Each distinct width gets one decode and one prefill token count, rotating through the lists, so the set stays
moderate (~30-60 per op) while still covering every T in the lists somewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from astra_sglang.contract.op import ShapeCase


@dataclass(frozen=True)
class ModelConfig:
    name: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int


MODELS: tuple[ModelConfig, ...] = (
    ModelConfig("LLaMA-2-7B", 4096, 11008, 32, 32, 128),
    ModelConfig("LLaMA-2-13B", 5120, 13824, 40, 40, 128),
    ModelConfig("LLaMA-2-70B", 8192, 28672, 64, 8, 128),
    ModelConfig("LLaMA-3-8B", 4096, 14336, 32, 8, 128),
    ModelConfig("LLaMA-3-70B", 8192, 28672, 64, 8, 128),
    ModelConfig("Qwen2.5-7B", 3584, 18944, 28, 4, 128),
    ModelConfig("Qwen2.5-72B", 8192, 29568, 64, 8, 128),
    ModelConfig("Mixtral-8x7B", 4096, 14336, 32, 8, 128),
)
TP_SIZES = (1, 2, 4, 8)
DECODE_T = (1, 8, 32, 64, 128, 256)
PREFILL_T = (512, 1024, 2048, 4096, 8192, 16384)


def model_widths(width: Callable[[ModelConfig, int], int | None]) -> list[tuple[int, str]]:
    """Distinct widths over every model and TP size, each with the first model/TP that produces it."""
    seen: dict[int, str] = {}
    for model in MODELS:
        for tp in TP_SIZES:
            w = width(model, tp)
            if w is not None and w not in seen:
                seen[w] = f"{model.name} TP{tp}"
    return list(seen.items())


def head_pairs() -> list[tuple[int, int, str]]:
    """(query heads, KV heads) per TP rank over every model and TP size that splits the query heads evenly,
    each with the first model/TP that gives it (KV heads below the TP size are replicated: one per rank)."""
    seen: dict[tuple[int, int], str] = {}
    for model in MODELS:
        for tp in TP_SIZES:
            if model.heads % tp == 0:
                seen.setdefault((model.heads // tp, max(1, model.kv_heads // tp)), f"{model.name} TP{tp}")
    return [(q, k, src) for (q, k), src in seen.items()]


def decode_prefill(widths: Iterable[tuple[dict[str, int], str]]) -> list[ShapeCase]:
    """One decode and one prefill case per width, T rotating through DECODE_T / PREFILL_T."""
    cases: list[ShapeCase] = []
    for i, (dims, source) in enumerate(widths):
        cases.append(ShapeCase(dims={"T": DECODE_T[i % len(DECODE_T)], **dims}, tags=["decode"],
                               source=f"{source} decode"))
        cases.append(
            ShapeCase(dims={"T": PREFILL_T[i % len(PREFILL_T)], **dims}, tags=["prefill"], source=f"{source} prefill")
        )
    return cases


def dedup(cases: Iterable[ShapeCase]) -> list[ShapeCase]:
    """Merge cases with equal dims: tags are united, the first source kept (paper tags survive)."""
    merged: dict[tuple[tuple[str, int], ...], ShapeCase] = {}
    for case in cases:
        key = tuple(sorted(case.dims.items()))
        if key in merged:
            old = merged[key]
            tags = old.tags + [t for t in case.tags if t not in old.tags]
            merged[key] = ShapeCase(dims=old.dims, tags=tags, source=old.source)
        else:
            merged[key] = case
    return list(merged.values())


def case(tags: list[str], source: str, **dims: int) -> ShapeCase:
    return ShapeCase(dims=dict(dims), tags=tags, source=source)


@dataclass(frozen=True)
class MoeConfig:
    """A mixture-of-experts model's routed-expert layer (published configs: num_local_experts / n_routed_experts,
    num_experts_per_tok, hidden_size, moe_intermediate_size)."""

    name: str
    experts: int
    top_k: int
    hidden: int
    intermediate: int  # per expert, before TP
    ep_sizes: tuple[int, ...]  # expert-parallel splits SGLang is run with (1 = TP only)


MOE_MODELS: tuple[MoeConfig, ...] = (
    MoeConfig("Mixtral-8x7B", 8, 2, 4096, 14336, (1,)),
    MoeConfig("Qwen3-30B-A3B", 128, 8, 2048, 768, (1, 2, 4, 8)),
    MoeConfig("Qwen3-235B-A22B", 128, 8, 4096, 1536, (1, 4, 8)),
    MoeConfig("DeepSeek-V3", 256, 8, 7168, 2048, (1, 8)),
)
