"""On the H200 image only (torch 2.11): before ``sgl_kernel`` is imported, load the five-symbol shim that lets
sglang-kernel 0.4.10 (built for torch 2.14.1) resolve against torch 2.11. Python runs this file at start-up in
every process whose path holds it, so SGLang's scheduler and tokenizer processes get it too. Nothing happens
until something imports sgl_kernel; the shim is built by device.sh next to this file."""

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
        return None


if os.path.exists(_SHIM):
    sys.meta_path.insert(0, _LoadShimFirst())
