"""kvcache: SGLang's Triton KV-cache store ``launch_reshape_and_cache_flash`` (``kvcache/cache_ops.py``).

Each token's K and V rows ([heads, head_dim]) are copied into a paged cache at the slot the scheduler assigned
(page = slot // page_size, row = slot % page_size); a negative slot (padding) is skipped. A pure copy: the
result is exact in every dtype.
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import (
    CallSite,
    Dim,
    ShapeCase,
    Signature,
    TensorArg,
    hook_target,
)
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import DECODE_T, MODELS, PREFILL_T, TP_SIZES, case, dedup

_MODULE = "sglang.kernels.ops.kvcache.cache_ops"
_ENTRY = f"{_MODULE}:launch_reshape_and_cache_flash"
MAX_ELEMS = 1 << 26  # EvalConfig.check_max_elems: the largest cache a case may allocate


def _shapes() -> list[ShapeCase]:
    """KV heads per TP rank of every model, decode and prefill token counts, page sizes 1 (SGLang's default),
    16 and 64 (paged backends); the pool holds about twice the batch's slots."""
    widths: dict[int, str] = {}
    for m in MODELS:
        for tp in TP_SIZES:
            widths.setdefault(max(1, m.kv_heads // tp), f"{m.name} TP{tp}")
    pages = (1, 16, 64)
    cases: list[ShapeCase] = []
    for i, (h, src) in enumerate(sorted(widths.items())):
        for tag, ts in (("decode", DECODE_T), ("prefill", PREFILL_T)):
            t, bs = ts[i % len(ts)], pages[i % len(pages)]
            dims = {"T": t, "H": h, "D": 128, "BS": bs, "X": t // bs + 2}
            if (2 * t + 3 * bs) * h * 128 <= MAX_ELEMS:
                cases.append(case([tag], f"{src} {tag}, page {bs}", **dims))
    cases += [
        case(["edge", "decode"], "edge: one token, page 1", T=1, H=8, D=128, BS=1, X=64),
        case(["edge", "decode"], "edge: one token in a large pool (page 16)", T=1, H=8, D=128, BS=16, X=2048),
        case(["edge"], "edge: head_dim not a power of two (masked lanes)", T=37, H=8, D=96, BS=16, X=8),
        case(["edge"], "edge: head_dim 64, heads not a multiple of the kernel's 4-head block", T=100, H=5, D=64,
             BS=1, X=300),
        case(["edge", "prefill"], "edge: head_dim 256 (Gemma-style)", T=2048, H=4, D=256, BS=64, X=40),
    ]
    return dedup(cases)


def reference(**args):
    key_cache = args["key_cache"].clone()
    value_cache = args["value_cache"].clone()
    pages, page_size, heads, dim = key_cache.shape
    slots = args["slot_mapping"].long()
    keep = slots >= 0
    key_cache.view(pages * page_size, heads, dim)[slots[keep]] = args["key"][keep]
    value_cache.view(pages * page_size, heads, dim)[slots[keep]] = args["value"][keep]
    return {"key_cache": key_cache, "value_cache": value_cache}


def make_inputs(dims, dtype, gen, device):
    t, bs, x = dims["T"], dims["BS"], dims["X"]
    pool = (t // bs + x) * bs
    free = torch.randperm(pool - bs, generator=gen, device=device) + bs  # page 0 is the padded page
    slots = free[:t].to(torch.int64)
    pad = t // 4
    if pad:
        slots[t - pad:] = -1
    return {"slot_mapping": slots}


REFERENCE = FileText(
    doc=(
        "Reference for reshape_and_cache_flash (astra-sglang, written): a scatter of K/V rows into the paged cache.\n"
        "\n"
        "slot s < 0 is padding and writes nothing; slot s >= 0 is page s // page_size, row s % page_size."
    ),
    functions=(reference,),
)

INPUTS = FileText(
    doc="Structured inputs for reshape_and_cache_flash (astra-sglang, written): the slot mapping of a batch.",
    imports=("import torch",),
    functions=(make_inputs,),
)


ENTRY = CatalogEntry(
    short_name="reshape_and_cache_flash",
    op_id="kvcache.reshape_and_cache_flash",
    entry_point=_ENTRY,
    kind="triton",
    signature=Signature(
        dims=[
            Dim(name="T", meaning="tokens of the batch (slot_mapping entries, padding included)"),
            Dim(name="H", meaning="KV heads (after TP)"),
            Dim(name="D", meaning="head dim"),
            Dim(name="BS", meaning="page size (slots per cache page)"),
            Dim(name="X", meaning="cache pages beyond T // BS (the pool is T // BS + X pages)", min=2),
        ],
        tensors=[
            TensorArg(name="key", role="input", shape=["T", "H", "D"], dtype="{dtype}"),
            TensorArg(name="value", role="input", shape=["T", "H", "D"], dtype="{dtype}"),
            TensorArg(name="key_cache", role="inplace", shape=["T//BS+X", "BS", "H", "D"], dtype="{dtype}"),
            TensorArg(name="value_cache", role="inplace", shape=["T//BS+X", "BS", "H", "D"], dtype="{dtype}"),
            TensorArg(name="slot_mapping", role="input", shape=["T"], dtype="int64", align_bytes=8, generated=True),
        ],
        dtypes=["bfloat16", "float16", "float32"],
        relations=[
            "for each token t with slot s = slot_mapping[t] >= 0: key_cache[s // BS, s % BS] = key[t], "
            "value_cache[s // BS, s % BS] = value[t]; every other cache element is unchanged",
            "slot_mapping < 0 marks padding: nothing is written for that token",
            "slots of one call are distinct (the scheduler's out_cache_loc); page 0 is SGLang's padded page",
        ],
        returns=[],
    ),
    reference=REFERENCE,
    inputs=INPUTS,
    shapes=_shapes,
    call=["key", "value", "key_cache", "value_cache", "slot_mapping"],
    wrapper=_ENTRY,
    aliases=("launch_reshape_and_cache_flash",),
    callsite_modules=(_MODULE, "sglang.kernels.ops.kvcache", "sglang.srt.mem_cache.memory_pool"),
    serving_sites={
        _ENTRY: "the definition",
        "sglang.srt.mem_cache.memory_pool:launch_reshape_and_cache_flash": "MHATokenToKVPool.set_kv_buffer on "
        "CUDA when SGLANG_USE_HND_KVCACHE=1 (HND layout), head_dim == v_head_dim and the K/V rows have inner "
        "strides (head_dim, 1); the caches are HND buffers [pages, H, BS, D] passed as permute(0, 2, 1, 3) views",
        "sglang.srt.layers.attention.aiter_backend:launch_reshape_and_cache_flash": "AMD aiter backend (unified "
        "attention with the SWA pool, or the fused FP8 KV write): not CUDA serving",
    },
    extra_sites=[
        CallSite(
            module="sglang.kernels.ops.kvcache", attr="reshape_and_cache_flash", binds="caller", target=None,
            same_function=True, reached_by_serving=False,
            note="the registry wrapper (get_kernel('kvcache.reshape_and_cache_flash')); no serving code calls it",
        ),
        CallSite(
            module="sglang.srt.mem_cache.memory_pool", attr="launch_reshape_and_cache_flash", binds="entry_point",
            target=hook_target(_ENTRY), same_function=True, reached_by_serving=True,
            note="read from source: set_kv_buffer's HND branch (SGLANG_USE_HND_KVCACHE=1, CUDA); the default NHD "
            "layout stores with _store_kv_layer instead",
        ),
    ],
    notes=[
        "Triton kernel reshape_and_cache_flash on grid (T, cdiv(H, 4)), BLOCK_D = next_pow2(D); the contract uses "
        "the NHD cache [pages, BS, H, D] contiguous, no SWA remap and no FP8 scale (the CUDA call site passes "
        "neither); SGLang's HND call site passes the same logical [pages, BS, H, D] as a permuted view",
        "a copy: outputs are exact, so any tolerance is slack only for candidates that are not copies",
    ],
)

