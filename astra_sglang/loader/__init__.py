"""Stand-alone loader: build and call an extracted kernel without SGLang.

Runs inside SGLang server processes too (the patch plugin). No eager imports: torch, triton and tvm_ffi are
imported by the modules that build or load a kernel, when they do.
"""
