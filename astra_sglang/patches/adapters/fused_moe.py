"""The two fused-MoE GEMMs (SGLang's Triton ``invoke_fused_moe_kernel``): the w1 up-projection (``fused_moe_kernel``)
and the w2 down-projection with the routing weights (``fused_moe_down``), one adapter each.

Call site: ``sglang.kernels.ops.moe.fused_moe_triton_kernels.invoke_fused_moe_kernel``, which SGLang's Triton MoE
runner (``moe_runner/triton_utils/fused_moe.py``) imports by name when its module loads: a REPLACE at plugin load,
before any model module is imported, is what ``fused_experts_impl`` then calls twice per MoE layer, eagerly and
under CUDA-graph capture. The two calls go through one function, so each adapter takes only its own call form
(``prepare`` returns None for the other, and the install chains the two patches: ``install.py``):

- up (w1): ``mul_routed_weight`` False, ``top_k`` = the routing's top-k, A ``[T, K]``, C ``[T*TK, N]``;
- down (w2): ``mul_routed_weight`` True, ``top_k`` 1, ``router_topk`` = the routing's top-k, A ``[T*TK, I]``,
  C ``[T, TK, H]``.

Served: unquantized bf16/fp16 weights and activations of one dtype, no bias, scales or zero points, no TMA, sorted C,
fused sum/all-reduce, LoRA output paths or fused SwiGLU, ``filter_expert`` False (every expert local: SGLang sets it
True only under expert parallelism, where ``expert_ids`` holds -1 blocks the contract never draws), a config dict of
the six keys the contract's scalars name (SGLang's tuned JSON; ``num_warps``/``num_stages`` default to Triton's 4/3
where the default config leaves them out), the sort sized as SGLang's moe_align sizes it (T*TK + E*(BM-1)). The
guard sees the routing dims, the GEMM's widths and the config; it never reads a device value.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from astra_sglang.contract.patch import GuardSpec
from astra_sglang.patches.adapters.base import Args, OpAdapter, Prepared, dim_ranges

_NAMES = ("A", "B", "C", "topk_weights", "topk_ids", "sorted_token_ids", "expert_ids", "num_tokens_post_padded")
_SCALARS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
_CONFIG_DIMS = {"BLOCK_SIZE_M": "BM", "BLOCK_SIZE_N": "BN", "BLOCK_SIZE_K": "BK", "GROUP_SIZE_M": "GM",
                "num_warps": "NW", "num_stages": "NS"}
_TRITON_DEFAULTS = {"num_warps": 4, "num_stages": 3}


class _FusedMoeAdapter(OpAdapter):
    tensor_names = _NAMES
    scalar_names = _SCALARS
    call_form_of = "sglang.kernels.ops.moe.fused_moe_triton_kernels:invoke_fused_moe_kernel"
    down = False

    def __init__(self) -> None:
        import torch

        self._half = (torch.bfloat16, torch.float16)
        self._f32, self._i32 = torch.float32, torch.int32
        self._inputs: Any = None
        self._weights: Any = weakref.WeakValueDictionary()  # (dims, dtype, device, seed) -> B, while a check holds it

    def prepare(self, A: Any, B: Any, bias: Any, C: Any, A_scale: Any, B_scale: Any, B_zp: Any, topk_weights: Any,
                topk_ids: Any, sorted_token_ids: Any, expert_ids: Any, num_tokens_post_padded: Any,
                mul_routed_weight: Any, top_k: Any, config: Any, compute_type: Any, use_fp8_w8a8: Any,
                use_int8_w8a8: Any, use_int8_w8a16: Any, use_int4_w4a16: Any, per_channel_quant: Any,
                block_shape: Any = None, no_combine: Any = False, a_use_tma: Any = False, b_use_tma: Any = False,
                c_sorted: Any = False, filter_expert: Any = True, fuse_sum_all_reduce: Any = False,
                router_topk: Any = 1, fuse_add_to_output: Any = False, add_output_mask: Any = None,
                mask_output: Any = False, lora_preserve_base: Any = False, fuse_swiglu: Any = False,
                a_output_slices: Any = 1) -> Prepared | None:
        """SGLang's full call (exactly ``invoke_fused_moe_kernel``'s signature) -> the contract's args, or None."""
        if (bias is not None or A_scale is not None or B_scale is not None or B_zp is not None or use_fp8_w8a8
                or use_int8_w8a8 or use_int8_w8a16 or use_int4_w4a16 or per_channel_quant or block_shape is not None
                or no_combine or a_use_tma or b_use_tma or c_sorted or filter_expert or fuse_sum_all_reduce
                or fuse_add_to_output or add_output_mask is not None or mask_output or lora_preserve_base
                or fuse_swiglu or a_output_slices != 1 or bool(mul_routed_weight) is not self.down
                or not isinstance(config, dict) or not isinstance(top_k, int)):
            return None
        scalars = self._config(config)
        if scalars is None:
            return None
        dt = A.dtype
        if (dt not in self._half or B.dtype != dt or C.dtype != dt or topk_weights.dtype != self._f32
                or topk_ids.dtype != self._i32 or sorted_token_ids.dtype != self._i32
                or expert_ids.dtype != self._i32 or num_tokens_post_padded.dtype != self._i32
                or str(compute_type) != ("bf16" if dt == self._half[0] else "fp16")):
            return None
        if (A.dim() != 2 or B.dim() != 3 or topk_ids.dim() != 2 or topk_weights.shape != topk_ids.shape
                or sorted_token_ids.dim() != 1 or expert_ids.dim() != 1 or num_tokens_post_padded.numel() != 1):
            return None
        t, tk = topk_ids.shape
        e, width, inner = B.shape
        bm = scalars["BLOCK_SIZE_M"]
        pairs = t * tk
        p_len = pairs + e * (bm - 1)
        if sorted_token_ids.shape[0] != p_len or expert_ids.shape[0] != -(-p_len // bm) or A.shape[1] != inner:
            return None
        if self.down:
            if top_k != 1 or router_topk != tk or A.shape[0] != pairs or C.numel() != pairs * width:
                return None
            gemm = {"H": width, "I": inner}
        else:
            if top_k != tk or A.shape[0] != t or C.numel() != pairs * width:
                return None
            gemm = {"N": width, "K": inner}
        if not C.is_contiguous():
            return None
        c = C.view(t, tk, width)  # SGLang's [T*TK, N] / [T, TK, H] / [1, T, H] buffer as the contract's [T, TK, .]
        tensors = (A, B, c, topk_weights, topk_ids, sorted_token_ids, expert_ids, num_tokens_post_padded)
        args: Args = dict(zip(_NAMES, tensors))
        args.update(scalars)
        dims = {"T": t, "TK": tk, "E": e, **gemm, **{_CONFIG_DIMS[k]: v for k, v in scalars.items()}}
        return Prepared(args, tensors, dims)

    def _config(self, config: dict[str, Any]) -> dict[str, int] | None:
        """The six scalars from SGLang's config dict; None for a key the contract does not name (its meaning
        would be the candidate's guess) or a value that is not an int."""
        if set(config) - set(_SCALARS):
            return None
        out = {k: config.get(k, _TRITON_DEFAULTS.get(k)) for k in _SCALARS}
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in out.values()):
            return None
        return out  # type: ignore[return-value]

    def launch(self, kernel: Callable[[Args], Any], p: Prepared) -> Any:
        kernel(p.args)
        return None  # the original returns nothing: C is written in place

    def sample(self, dims: dict[str, int], dtype: Any, device: Any, seed: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """SGLang's call for a routed batch from the contract's own generator (top-k of biased router logits, then
        moe_align), random activations and weights, a poisoned output; the config from the dims."""
        import torch
        import triton.language as tl

        from astra_sglang.checker import fill_poison

        make = self._contract_inputs()
        name = str(dtype).removeprefix("torch.")
        g = torch.Generator(device=device).manual_seed(seed)
        r = make(dims, name, g, str(device))
        t, tk, e = dims["T"], dims["TK"], dims["E"]
        width, inner = (dims["H"], dims["I"]) if self.down else (dims["N"], dims["K"])
        a = torch.randn((t * tk if self.down else t, inner), generator=g, device=device).to(dtype)
        # The expert weights are the check's bulk (Qwen3-30B-A3B TP1 w1: 0.8 GB in bf16) and no call writes them:
        # the original's, the patch's and the reference's samples of one case share one copy (nothing is drawn
        # after it, so every other tensor is what a fresh sample gives). It lives as long as a sample holds it.
        key = (tuple(sorted(dims.items())), str(dtype), str(device), seed)
        b = self._weights.get(key)
        if b is None:
            b = (torch.randn((e, width, inner), generator=g, device=device) * inner ** -0.5).to(dtype)
            self._weights[key] = b
        c = torch.empty((t, tk, width) if self.down else (t * tk, width), dtype=dtype, device=device)
        fill_poison(c)  # an element the kernel never writes keeps the checker's poison
        config = {k: dims[d] for k, d in _CONFIG_DIMS.items()}
        compute = tl.bfloat16 if dtype == torch.bfloat16 else tl.float16
        args = (a, b, None, c, None, None, None, r["topk_weights"], r["topk_ids"], r["sorted_token_ids"],
                r["expert_ids"], r["num_tokens_post_padded"], self.down, 1 if self.down else tk, config, compute,
                False, False, False, False, False)
        kwargs: dict[str, Any] = {"filter_expert": False}
        if self.down:
            kwargs["router_topk"] = tk
        return args, kwargs

    def _contract_inputs(self) -> Any:
        """The op folder's ``make_inputs`` (loaded once): the routing the contract checked candidates on."""
        if self._inputs is None:
            from astra_sglang.contract.op import load_manifest
            from astra_sglang.loader.launch import load_inputs
            from astra_sglang.patches.registry import op_folder

            folder = op_folder(self.op)
            make, _ = load_inputs(folder, load_manifest(folder))
            if make is None:
                raise ValueError(f"{folder} has no input generator; {self.op}'s sample needs its routed batches")
            self._inputs = make
        return self._inputs

    def outputs(self, args: tuple[Any, ...], kwargs: dict[str, Any], ret: Any) -> dict[str, Any]:
        t, tk = args[8].shape
        return {"C": args[3].view(t, tk, -1)}

    def default_guard(self) -> GuardSpec:
        widths = {"H": (64, 16384, 8), "I": (64, 16384, 8)} if self.down else {"N": (64, 32768, 2),
                                                                             "K": (64, 16384, 8)}
        return GuardSpec(dtypes=["bfloat16", "float16"],
                         dims=dim_ranges(T=(1, 65536, 1), TK=(1, 16, 1), E=(1, 512, 1), **widths))



class FusedMoeUpAdapter(_FusedMoeAdapter):
    op = "fused_moe_kernel"
    down = False


class FusedMoeDownAdapter(_FusedMoeAdapter):
    op = "fused_moe_down"
    down = True
