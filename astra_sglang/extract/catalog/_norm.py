"""JIT RMSNorm variants whose template arguments include a width: extracted for one width each.

``rmsnorm`` (``elementwise/rmsnorm.cuh``) is specialised on the hidden size (the kernel class and the first
template argument), ``fused_inplace_qknorm`` (``elementwise/qknorm.cuh``) on head_dim. The manifest's
template arguments are per dtype only, so each folder pins that width (Dim min == max) and says so.
"""

from __future__ import annotations

from astra_sglang.contract.op import ScalarArg

MODULE = "sglang.kernels.ops.layernorm.norm"
EPS = ScalarArg(name="eps", type="float", default=1e-6, meaning="variance epsilon")


