"""merge_state (SGLang's Triton ``merge_state_triton``, base-e LSE): merge two attention partial states.

Call site: ``sglang.kernels.ops.attention.merge_state.merge_state_triton``, reached from
``flashinfer_backend._safe_merge_state`` above 64 heads at head_dim 128 (and other backends). FlashInfer's
``flashinfer.cascade.merge_state`` is a different function (base-2 LSE): a patch for this op never stands in
for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from astra_sglang.contract.patch import GuardSpec
from astra_sglang.patches.adapters.base import Args, OpAdapter, Prepared, dim_ranges

_NAMES = ("prefix_output", "prefix_lse", "suffix_output", "suffix_lse", "output", "output_lse")


class MergeStateAdapter(OpAdapter):
    op = "merge_state"
    tensor_names = _NAMES

    def prepare(self, prefix_output: Any, prefix_lse: Any, suffix_output: Any, suffix_lse: Any,
                output: Any = None, output_lse: Any = None) -> Prepared | None:
        import torch

        if prefix_output.dim() != 3:
            return None
        t, h, d = prefix_output.shape
        f32 = torch.float32
        if (suffix_output.shape != prefix_output.shape or suffix_output.dtype != prefix_output.dtype
                or prefix_lse.shape != (t, h) or suffix_lse.shape != (t, h)
                or prefix_lse.dtype != f32 or suffix_lse.dtype != f32):
            return None
        tensors = [prefix_output, prefix_lse, suffix_output, suffix_lse]
        if output is not None:
            if output.shape != prefix_output.shape or output.dtype != prefix_output.dtype:
                return None
            tensors.append(output)
        if output_lse is not None:
            if output_lse.shape != (t, h) or output_lse.dtype != f32:
                return None
            tensors.append(output_lse)
        args = dict(zip(_NAMES, (prefix_output, prefix_lse, suffix_output, suffix_lse, output, output_lse)))
        return Prepared(args, tuple(tensors), {"T": t, "NH": h, "D": d})

    def launch(self, kernel: Callable[[Args], Any], p: Prepared) -> Any:
        import torch

        a = p.args
        if a["output"] is None:  # exactly the original's allocations
            a["output"] = torch.empty_like(a["prefix_output"])
        if a["output_lse"] is None:
            a["output_lse"] = torch.empty_like(a["prefix_lse"])
        kernel(a)
        return a["output"], a["output_lse"]

    def sample(self, dims: dict[str, int], dtype: Any, device: Any, seed: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        import torch

        g = torch.Generator(device="cpu").manual_seed(seed)
        t, h, d = dims["T"], dims["NH"], dims["D"]
        v = [torch.randn(t, h, d, generator=g).to(dtype=dtype, device=device) for _ in range(2)]
        s = [(torch.randn(t, h, generator=g) * 4).to(device=device) for _ in range(2)]
        return (v[0], s[0], v[1], s[1]), {}

    def outputs(self, args: tuple[Any, ...], kwargs: dict[str, Any], ret: Any) -> dict[str, Any]:
        return {"output": ret[0], "output_lse": ret[1]}

    def default_guard(self) -> GuardSpec:
        return GuardSpec(dtypes=["bfloat16", "float16"],
                         dims=dim_ranges(T=(1, 65536, 1), NH=(1, 256, 1), D=(64, 256, 64)))

