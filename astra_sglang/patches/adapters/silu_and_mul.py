"""silu_and_mul: ``out = silu(input[..., :H]) * input[..., H:]``.

Call site: ``sglang.kernels.ops.activation.activation.silu_and_mul``, the JIT function that
``sglang.srt.layers.activation`` binds as ``_jit_silu_and_mul`` (REPLACE rebinds that copy; SiluAndMul.forward_cuda
reaches it through ``silu_and_mul -> _act_and_mul`` whenever the output width is a multiple of 16 bytes) and that
the MoE code from-imports. Calls with ``expert_ids`` (MoE filtered/sorted forms) are not served: original.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from astra_sglang.contract.patch import GuardSpec
from astra_sglang.patches.adapters.base import Args, OpAdapter, Prepared, dim_ranges


class SiluAndMulAdapter(OpAdapter):
    op = "silu_and_mul"
    tensor_names = ("input", "out")

    def prepare(
        self,
        input: Any,
        out: Any = None,
        expert_ids: Any = None,
        expert_step: int = 1,
        *,
        sorted_token_ids: Any = None,
        num_tokens_post_padded: Any = None,
        num_valid_tokens: int = 0,
    ) -> Prepared | None:
        if expert_ids is not None or sorted_token_ids is not None or input.dim() < 1:
            return None
        h2 = input.shape[-1]
        if h2 % 2:
            return None
        h = h2 // 2
        t = input.numel() // h2 if h2 else 0
        if out is None:
            return Prepared({"input": input, "out": None}, (input,), {"T": t, "H": h})
        if out.dtype != input.dtype or out.shape[-1] != h or out.numel() != t * h:
            return None
        return Prepared({"input": input, "out": out}, (input, out), {"T": t, "H": h})

    def launch(self, kernel: Callable[[Args], Any], p: Prepared) -> Any:
        a = p.args
        x = a["input"]
        out = a["out"]
        if out is None:  # exactly the original's allocation
            out = x.new_empty(*x.shape[:-1], x.shape[-1] // 2)
        h = p.dims["H"]
        kernel({"input": x.view(-1, 2 * h), "out": out.view(-1, h)})
        return out

    def sample(self, dims: dict[str, int], dtype: Any, device: Any, seed: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        import torch

        from astra_sglang.checker import fill_poison

        g = torch.Generator(device="cpu").manual_seed(seed)
        x = (torch.randn(dims["T"], 2 * dims["H"], generator=g) * 3).to(dtype=dtype, device=device)
        out = torch.empty((dims["T"], dims["H"]), dtype=dtype, device=device)
        fill_poison(out)  # an element the kernel never writes keeps the checker's poison
        return (x, out), {}

    def outputs(self, args: tuple[Any, ...], kwargs: dict[str, Any], ret: Any) -> dict[str, Any]:
        return {"out": args[1]}

    def default_guard(self) -> GuardSpec:
        return GuardSpec(dtypes=["bfloat16", "float16"], dims=dim_ranges(T=(1, 65536, 1), H=(8, 32768, 8)))

