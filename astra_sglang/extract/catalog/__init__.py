"""The op catalog: one module per op under ``ops/`` with what extraction cannot derive from SGLang's code.

An op without an entry is listed by ``extract --list`` with its sources but refused by ``extract`` with the
reason: without a signature and a reference a folder could not be checked, so it would be worse than none.
"""

from __future__ import annotations

from functools import cache

from astra_sglang.extract.catalog.base import CatalogEntry

# In catalog order (``entries()``); 'ops.NAME' is one op's module (its ENTRY), any other name a family module
# not yet split into ops (its ENTRIES).
_MODULES = (
    "ops.silu_and_mul", "ops.gelu_and_mul", "ops.gelu_tanh_and_mul", "ops.relu2",
    "ops.silu_and_mul_with_activation_rounding", "ops.fused_add_rmsnorm", "ops.merge_state", "softcap",
    "ops.row_scale_bf16", "norm",
    # serving-path helpers (KV-slot lookups, ragged layouts, samplers, speculative and MoE routing, copies)
    "last_loc", "row_argmax", "ragged_layout", "ops.fill_padded_rows", "ops.pack_verify_mask_into", "spec_decode",
    "lora_moe_align", "ops.gather_spec_extras", "ops.gemma_routing_post_topk", "ops.concat_and_cast_mha_k_triton",
    "ops.memcpy_triton", "ops.q8kv8_topk_length_from_indices", "ops.shuffle_rows_with_scales",
    # MoE routing and FP8 quantization on the serving hot path
    "ops.moe_align_block_size", "ops.fused_moe_kernel", "quant",
    # the attention hot path: KV-cache store, RoPE, decode/extend attention
    "ops.reshape_and_cache_flash", "rope", "attention",
)


@cache
def entries() -> tuple[CatalogEntry, ...]:
    import importlib

    found: list[CatalogEntry] = []
    for name in _MODULES:
        module = importlib.import_module(f"astra_sglang.extract.catalog.{name}")
        found += [module.ENTRY] if name.startswith("ops.") else module.ENTRIES
    return tuple(found)


def find(name: str) -> CatalogEntry | None:
    for entry in entries():
        if name in (entry.short_name, entry.op_id, entry.entry_point, *entry.aliases):
            return entry
    return None
