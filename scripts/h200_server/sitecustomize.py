"""On the H200 image only (torch 2.11): before ``sgl_kernel`` is imported, load the five-symbol shim that lets
sglang-kernel 0.4.10 (built for torch 2.14.1) resolve against torch 2.11. Python runs this file at start-up in
every process whose path holds it, so SGLang's scheduler and tokenizer processes get it too. Nothing happens
until something imports sgl_kernel; the shim is built by device.sh next to this file. Once sgl_kernel is imported,
sgl_kernel_torch211_ops.install() gives the ops a LLaMA model reaches kernels built for torch 2.11 (the shim fixes
linking and registration; the kernels inside sglang-kernel's library cannot run under 2.11, see that module)."""

import importlib.abc
import os
import sys

_SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libsgl_kernel_torch211_shim.so")


class _LoadShimFirst(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "sgl_kernel":
            sys.meta_path.remove(self)
            import ctypes

            import torch  # noqa: F401  (the shim's own dependencies: libc10, libtorch_cpu)

            ctypes.CDLL(_SHIM, mode=ctypes.RTLD_GLOBAL)
            import importlib.machinery

            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is not None and spec.loader is not None:
                run = spec.loader.exec_module

                def exec_module(module, run=run):
                    run(module)
                    import sgl_kernel_torch211_ops

                    sgl_kernel_torch211_ops.install(os.path.dirname(_SHIM))

                spec.loader.exec_module = exec_module  # type: ignore[method-assign]
            return spec
        return None


_DUAL_GEMM = "sglang.kernels.ops.gemm.cutedsl_dual_gemm"


class _DualGemmWithoutCutlass(importlib.abc.MetaPathFinder):
    """Without nvidia-cutlass-dsl, SGLang's Blackwell-only dual GEMM module is served by its sm_90 stand-in
    (cutedsl_dual_gemm_sm90.py says what it answers)."""

    def find_spec(self, name, path=None, target=None):
        if name != _DUAL_GEMM:
            return None
        import importlib.util

        if importlib.util.find_spec("cutlass") is not None:
            return None
        here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cutedsl_dual_gemm_sm90.py")
        return importlib.util.spec_from_file_location(name, here)


if os.path.exists(_SHIM):
    sys.meta_path.insert(0, _LoadShimFirst())
    sys.meta_path.insert(0, _DualGemmWithoutCutlass())
