"""The op catalog: one module per op under ``ops/``, named as its short_name, with what extraction cannot
derive from SGLang's code (its ``ENTRY``).

An op without an entry is listed by ``extract --list`` with its sources but refused by ``extract`` with the
reason: without a signature and a reference a folder could not be checked, so it would be worse than none.
"""

from __future__ import annotations

from functools import cache

from astra_sglang.extract.catalog.base import CatalogEntry

# The catalog's order (entries(), and so the first match of find()); tests check it names every ops/ module.
OPS = (
    "silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul", "relu2", "silu_and_mul_with_activation_rounding",
    "fused_add_rmsnorm", "merge_state", "softcap_inplace_logits", "softcap_to_float32_logits",
    "cast_to_float32_logits", "row_scale_bf16", "rmsnorm", "fused_inplace_qknorm",
    # serving-path helpers (KV-slot lookups, ragged layouts, samplers, speculative and MoE routing, copies)
    "get_last_loc_triton", "get_last_loc_triton_safe", "row_argmax", "div_argmax", "compute_position_triton",
    "pad_draft_extend_query", "unpad_draft_extend_output", "fill_padded_rows", "pack_verify_mask_into",
    "draft_topk1_postprocess", "pad_verify_lens_to_bucket_triton", "pair_to_row_map", "moe_align_single_token",
    "gather_spec_extras", "gemma_routing_post_topk", "concat_and_cast_mha_k_triton", "memcpy_triton",
    "q8kv8_topk_length_from_indices", "shuffle_rows_with_scales",
    # MoE routing and FP8 quantization on the serving hot path
    "moe_align_block_size", "fused_moe_kernel", "fused_moe_down", "per_token_quant_fp8", "per_token_group_quant_fp8",
    # the attention hot path: KV-cache store, RoPE, decode/extend attention
    "reshape_and_cache_flash", "fused_rope", "fused_qk_rope_reshape_and_cache", "apply_interleaved_rope",
    "decode_attention", "extend_attention",
)


@cache
def entries() -> tuple[CatalogEntry, ...]:
    import importlib

    return tuple(importlib.import_module(f"astra_sglang.extract.catalog.ops.{name}").ENTRY for name in OPS)


def find(name: str) -> CatalogEntry | None:
    for entry in entries():
        if name in (entry.short_name, entry.op_id, entry.entry_point, *entry.aliases):
            return entry
    return None
