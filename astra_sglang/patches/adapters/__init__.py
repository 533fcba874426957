"""Per-op adapters: the calling convention of SGLang's function at each patchable call site."""

from __future__ import annotations

from astra_sglang.errors import AstraError
from astra_sglang.patches.adapters.base import OpAdapter, Prepared, make_guard


def get_adapter(op: str) -> OpAdapter:
    if op == "silu_and_mul":
        from astra_sglang.patches.adapters.silu_and_mul import SiluAndMulAdapter

        return SiluAndMulAdapter()
    if op == "fused_add_rmsnorm":
        from astra_sglang.patches.adapters.fused_add_rmsnorm import (
            FusedAddRMSNormAdapter,
        )

        return FusedAddRMSNormAdapter()
    if op == "merge_state":
        from astra_sglang.patches.adapters.merge_state import MergeStateAdapter

        return MergeStateAdapter()
    raise AstraError(f"no patch adapter for op {op!r} (known: silu_and_mul, fused_add_rmsnorm, merge_state)")


__all__ = ["OpAdapter", "Prepared", "get_adapter", "make_guard"]
