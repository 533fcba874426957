"""fused_add_rmsnorm, in place: ``residual += input; input = rmsnorm(residual) * weight``.

Call site: ``sgl_kernel.fused_add_rmsnorm`` (FlashInfer's kernel), what ``RMSNorm.forward_cuda`` calls as
``sglang.srt.layers.layernorm.fused_add_rmsnorm`` on the default path (``cast_x_before_out_mul=False``);
REPLACE rebinds that from-import copy. Calls with ``enable_pdl`` set are not served: original.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from astra_sglang.contract.patch import GuardSpec
from astra_sglang.patches.adapters.base import Args, OpAdapter, Prepared, dim_ranges


class FusedAddRMSNormAdapter(OpAdapter):
    op = "fused_add_rmsnorm"
    tensor_names = ("input", "residual", "weight")
    scalar_names = ("eps",)

    def prepare(self, input: Any, residual: Any, weight: Any, eps: float = 1e-6,
                enable_pdl: Any = None) -> Prepared | None:
        if enable_pdl is not None or input.dim() != 2:
            return None
        t, h = input.shape
        if (residual.shape != input.shape or residual.dtype != input.dtype or weight.dim() != 1
                or weight.shape[0] != h or weight.dtype != input.dtype):
            return None
        return Prepared({"input": input, "residual": residual, "weight": weight, "eps": float(eps)},
                        (input, residual, weight), {"T": t, "H": h})

    def launch(self, kernel: Callable[[Args], Any], p: Prepared) -> Any:
        kernel(p.args)
        return None

    def sample(self, dims: dict[str, int], dtype: Any, device: Any, seed: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        import torch

        g = torch.Generator(device="cpu").manual_seed(seed)
        t, h = dims["T"], dims["H"]
        x = torch.randn(t, h, generator=g).to(dtype=dtype, device=device)
        r = torch.randn(t, h, generator=g).to(dtype=dtype, device=device)
        w = (1 + 0.1 * torch.randn(h, generator=g)).to(dtype=dtype, device=device)
        return (x, r, w, 1e-6), {}

    def outputs(self, args: tuple[Any, ...], kwargs: dict[str, Any], ret: Any) -> dict[str, Any]:
        return {"input": args[0], "residual": args[1]}

    def default_guard(self) -> GuardSpec:
        return GuardSpec(dtypes=["bfloat16", "float16"], dims=dim_ranges(T=(1, 65536, 1), H=(64, 16384, 8)))

