"""Per-op adapters: the calling convention of SGLang's function at each patchable call site.

One registry (op -> module:class, imported on first use: a serving process loads only the adapters its patches
need); ``patches add --op`` takes its choices from it, so a new adapter is one line here.
"""

from __future__ import annotations

import importlib

from astra_sglang.errors import AstraError
from astra_sglang.patches.adapters.base import OpAdapter, Prepared, make_guard

ADAPTERS: dict[str, str] = {
    "silu_and_mul": "astra_sglang.patches.adapters.silu_and_mul:SiluAndMulAdapter",
    "fused_add_rmsnorm": "astra_sglang.patches.adapters.fused_add_rmsnorm:FusedAddRMSNormAdapter",
    "merge_state": "astra_sglang.patches.adapters.merge_state:MergeStateAdapter",
    "decode_attention": "astra_sglang.patches.adapters.decode_attention:DecodeAttentionAdapter",
    "fused_moe_kernel": "astra_sglang.patches.adapters.fused_moe:FusedMoeUpAdapter",
    "fused_moe_down": "astra_sglang.patches.adapters.fused_moe:FusedMoeDownAdapter",
}


def adapter_ops() -> list[str]:
    """The ops a patch can target: those with an adapter."""
    return list(ADAPTERS)


def get_adapter(op: str) -> OpAdapter:
    where = ADAPTERS.get(op)
    if where is None:
        raise AstraError(f"no patch adapter for op {op!r} (known: {', '.join(ADAPTERS)})")
    module, cls = where.split(":")
    adapter = getattr(importlib.import_module(module), cls)()
    assert isinstance(adapter, OpAdapter)
    return adapter


__all__ = ["ADAPTERS", "OpAdapter", "Prepared", "adapter_ops", "get_adapter", "make_guard"]
