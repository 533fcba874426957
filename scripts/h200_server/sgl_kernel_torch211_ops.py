"""ON THE H200 image only (torch 2.11), run by sitecustomize.py right after ``import sgl_kernel``: give the sgl_kernel
ops a dense LLaMA model reaches CUDA kernels built for torch 2.11 (sgl_kernel_torch211_ops.cu says why and what),
and make every other sgl_kernel CUDA kernel refuse to run: compiled against torch 2.14's TensorImpl layout, they
would read wrong sizes and pointers, and a wrong result in both servers of an A/B would look like agreement."""

from __future__ import annotations

import inspect
import os
import warnings

REBUILT = ("rmsnorm", "fused_add_rmsnorm", "weak_ref_tensor")


def _refuse(name: str):
    def kernel(*args, **kwargs):
        raise RuntimeError(f"sgl_kernel::{name} was built for torch 2.14 and cannot run under torch 2.11 (its inline "
                           "TensorImpl accessors read another layout); the H200 recipe rebuilt only "
                           f"{', '.join(REBUILT)} (scripts/h200_server/sgl_kernel_torch211_ops.cu)")
    return kernel


def _moe_align_via_jit(topk_ids, num_experts, block_size, sorted_token_ids, experts_ids, num_tokens_post_pad,
                       cumsum_buffer, pad_sorted_token_ids=False, *rest):
    """sgl_kernel::moe_align_block_size served by SGLang's JIT kernel; the AOT-only ``ignore_invalid_expert``
    contract (EP filtering) has no JIT twin and is refused rather than answered differently."""
    if rest and rest[0]:
        raise RuntimeError("sgl_kernel::moe_align_block_size(ignore_invalid_expert=True) has no JIT twin; the H200 "
                           "recipe routes only the plain form (scripts/h200_server/sgl_kernel_torch211_ops.py)")
    from sglang.kernels.ops.moe.moe_align import moe_align_block_size

    moe_align_block_size(topk_ids, num_experts, block_size, sorted_token_ids, experts_ids, num_tokens_post_pad,
                         cumsum_buffer, bool(pad_sorted_token_ids))


def _moe_sum_reduce_via_triton(input, output, routed_scaling_factor):
    """sgl_kernel::moe_sum_reduce served by SGLang's Triton kernel of the same signature (what SGLang's own
    fused_moe uses where sgl_kernel is absent: moe_runner/triton_utils/fused_moe.py, HIP path)."""
    from sglang.kernels.ops.moe.fused_moe_triton_kernels import moe_sum_reduce_triton

    moe_sum_reduce_triton(input, output, float(routed_scaling_factor))


# sgl_kernel ops whose calls go to SGLang's own twin, JIT (tvm-ffi, built by nvcc here) or Triton, neither tied to
# torch's ABI. moe_align_block_size: SGLang 0.5.23 registers AOT and JIT under one op id (sglang.kernels.ops.moe)
# and calls the JIT one itself with the same arguments (moe_runner/triton_utils/moe_align_block_size.py). A MoE
# model reached moe_align_block_size, then moe_sum_reduce, on the H200 (2026-12-03); what it reaches after those
# has not run here yet.
_ROUTES = {"moe_align_block_size": _moe_align_via_jit, "moe_sum_reduce": _moe_sum_reduce_via_triton}


def install(site: str) -> list[str]:
    """Builds (once: torch caches it by source and flags) from ``site``, the folder sitecustomize.py and its
    copies of this module, the .cu file and flashinfer_include are in (device.sh puts them there; a script's own
    folder can shadow this module, and its sources must not move). Returns the sgl_kernel ops now refused."""
    import torch
    import torch.library
    from torch.utils.cpp_extension import load

    names = sorted({r.split("::", 1)[1] for r in torch._C._dispatch_get_registrations_for_dispatch_key("CUDA")
                    if r.startswith("sgl_kernel::")})  # with the overload name where there is one
    lib = torch.library.Library("sgl_kernel", "IMPL")
    kw = {"allow_override": True} if "allow_override" in inspect.signature(lib.impl).parameters else {}
    routed = [n for n in names if n.split(".", 1)[0] in _ROUTES]
    refused = [n for n in names if n not in REBUILT and n not in routed]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overriding a previously registered kernel": that is the point
        for name in refused:
            lib.impl(name, _refuse(name), "CUDA", **kw)
        for name in routed:
            lib.impl(name, _ROUTES[name.split(".", 1)[0]], "CUDA", **kw)
        load(name="sgl_kernel_torch211_ops", sources=[os.path.join(site, "sgl_kernel_torch211_ops.cu")],
             extra_include_paths=[os.path.join(site, "flashinfer_include")], is_python_module=False,
             extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr",
                                # torch's extension flags disable the half/bf16 operators FlashInfer uses
                                "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
                                "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__"],
             verbose=False)
    globals()["_keep"] = lib  # a Library deregisters its kernels when collected
    return refused
