"""silu_and_mul in Triton, written by hand by the astra-sglang developers (not produced by a language model).

``out[t, j] = silu(input[t, j]) * input[t, H + j]`` computed in float32, rounded once to the output dtype.
Its first job is to be the CI vehicle of the patch plugin (it runs on CPU under TRITON_INTERPRET=1); whether it
beats SGLang's JIT kernel on a GPU is for `patches verify` to say, never assumed.
Needs contiguous [T, 2H] input and [T, H] output (the plugin's guard makes sure).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, H, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    col = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = col < H
    gate = tl.load(x_ptr + row * 2 * H + col, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * 2 * H + H + col, mask=mask, other=0.0).to(tl.float32)
    y = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * H + col, y.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(input: torch.Tensor, out: torch.Tensor) -> None:
    rows, hidden = out.shape
    if rows == 0:
        return
    block = min(1024, triton.next_power_of_2(hidden))
    _silu_and_mul_kernel[(rows, triton.cdiv(hidden, block))](input, out, hidden, BLOCK=block)
