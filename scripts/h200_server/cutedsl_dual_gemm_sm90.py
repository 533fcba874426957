"""ON THE H200 image only, and only while the ``cutlass`` package (nvidia-cutlass-dsl, an SGLang dependency the
image lacks and this recipe does not carry) is absent: stands in for ``sglang.kernels.ops.gemm.cutedsl_dual_gemm``,
SGLang 0.5.23's Blackwell-only CuTe DSL dual GEMM, which every LlamaMLP imports at construction. Its real
``can_use_dual_gemm`` returns False on sm_90 (it requires ``is_sm100_supported()``), so the MLP takes its usual
path; this module gives that same answer and refuses to answer for an sm_100 GPU."""

from __future__ import annotations

from enum import IntEnum

MAX_DUAL_GEMM_DECODE_TOKENS = 16  # the real module's value


class DualGemmQuantMode(IntEnum):  # the real module's members and properties
    STATIC_PER_TENSOR = 0
    STATIC_PER_TOKEN = 1
    DYNAMIC_PER_TENSOR = 2
    DYNAMIC_PER_TOKEN = 3
    UNQUANT = 4

    @property
    def is_quantized(self) -> bool:
        return self is not self.UNQUANT

    @property
    def is_dynamic(self) -> bool:
        return self in (self.DYNAMIC_PER_TENSOR, self.DYNAMIC_PER_TOKEN)

    @property
    def is_per_token(self) -> bool:
        return self in (self.STATIC_PER_TOKEN, self.DYNAMIC_PER_TOKEN)


def can_use_dual_gemm(num_tokens: int, hidden_size: int, intermediate_size: int, quant_mode: DualGemmQuantMode) -> bool:
    from sglang.srt.utils import is_sm100_supported

    if is_sm100_supported():
        raise RuntimeError("the sm_90 stand-in for cutedsl_dual_gemm cannot answer on an sm_100 GPU: install "
                           "nvidia-cutlass-dsl")
    return False
