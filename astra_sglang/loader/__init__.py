"""Stand-alone loader: build and call an extracted kernel without SGLang.

Runs inside SGLang server processes too (the patch plugin), so importing this package pulls in only pydantic
and the stdlib; torch, triton and tvm_ffi are imported when a kernel is actually built or loaded.
"""

from astra_sglang.loader.cuda_build import BuildError, BuiltModule, build_cuda_module, default_cache_dir
from astra_sglang.loader.launch import Launcher, load_reference, make_launcher, resolve_call
from astra_sglang.loader.pyimport import import_path, load_function, load_triton_wrapper

__all__ = [
    "BuildError",
    "BuiltModule",
    "Launcher",
    "build_cuda_module",
    "default_cache_dir",
    "import_path",
    "load_function",
    "load_reference",
    "load_triton_wrapper",
    "make_launcher",
    "resolve_call",
]
