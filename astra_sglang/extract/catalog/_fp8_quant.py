"""Dynamic FP8 E4M3 activation quantization, the activation side of SGLang's FP8 GEMMs on CUDA: per token
(JIT ``gemm/per_token_quant_fp8.cuh``, w8a8 FP8 with per-channel weights) and per token-group of 128
(JIT ``gemm/per_token_group_quant.cuh``, DeepSeek-V3's block-wise FP8).

Per row: scale = max|x| / 448, q = fp8(clamp(x / scale, -448, 448)). SGLang's Python ``sglang_per_token_quant_fp8``
(``kernels/ops/quantization/fp8_kernel.py``) is not a Triton kernel: on CUDA it allocates the outputs and calls
this JIT kernel, so it is this op, not another one.
"""

from __future__ import annotations

from astra_sglang.contract.op import ShapeCase, Tolerance

FP8 = "sglang.kernels.ops.quantization.fp8_kernel"
DTYPES = ("bfloat16", "float16", "float32")

# The scale is max|x| (exact) / 448 in float32: fast-math division is within 2 ulp (2.4e-7), so rtol 1e-5 as
# for any float32 output; atol 0 because scales of tiny inputs are ~1e-5 themselves. The fp8 output gets the
# checker's one-fp8-ulp allowance (checker._FP8_MANTISSA): a last-bit difference in the scale moves a value
# that sits on an fp8 rounding midpoint to the neighbouring code, which is as correct.
TOLERANCES = {d: Tolerance(atol=0.0, rtol=1e-5) for d in DTYPES}


def capped(c: ShapeCase) -> ShapeCase:
    """Prefill T halved until T*H <= 2^26 elements (a 16384-token chunk of a 29568-wide row is 0.5 G)."""
    t = c.dims["T"]
    while t * c.dims["H"] > 1 << 26 and t > 512:
        t //= 2
    return c if t == c.dims["T"] else ShapeCase(dims={**c.dims, "T": t}, tags=c.tags, source=f"{c.source} (T capped)")


