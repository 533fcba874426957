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
    refused = [n for n in names if n not in REBUILT]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overriding a previously registered kernel": that is the point
        for name in refused:
            lib.impl(name, _refuse(name), "CUDA", **kw)
        load(name="sgl_kernel_torch211_ops", sources=[os.path.join(site, "sgl_kernel_torch211_ops.cu")],
             extra_include_paths=[os.path.join(site, "flashinfer_include")], is_python_module=False,
             extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr",
                                # torch's extension flags disable the half/bf16 operators FlashInfer uses
                                "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
                                "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__"],
             verbose=False)
    globals()["_keep"] = lib  # a Library deregisters its kernels when collected
    return refused
