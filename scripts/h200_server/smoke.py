"""ON THE DEVICE: does sgl_kernel 0.4.10 (built for torch 2.14.1) compute right under torch 2.11 with the shim?
Each kernel SGLang's LLaMA path calls is checked against a torch float32 reference; then the server's modules
are imported the way SGLang's processes import them."""

import importlib
import time

import torch

t0 = time.time()
import sgl_kernel  # noqa: E402  (sitecustomize loads the shim first)

print(f"sgl_kernel {sgl_kernel.__version__} imported under torch {torch.__version__} in {time.time() - t0:.1f} s")
torch.manual_seed(0)
dev = "cuda"
x = torch.randn(300, 4096, device=dev, dtype=torch.bfloat16)
r = torch.randn_like(x)
w = 1 + 0.1 * torch.randn(4096, device=dev, dtype=torch.bfloat16)


def rms(v, w, eps=1e-6):
    v = v.float()
    return (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps) * w.float())


xs, rs = x.clone(), r.clone()
sgl_kernel.fused_add_rmsnorm(xs, rs, w, 1e-6)
ref_r = (x.float() + r.float())
ok_r = (rs.float() - ref_r).abs().max().item()
ok_x = (xs.float() - rms(ref_r.bfloat16(), w)).abs().max().item()
bad = []


def report(what: str, err: float, tol: float) -> None:
    """bf16 results against a float32 reference: a few bf16 ulps of values of order 1-10 (tol), or a wrong
    kernel (errors of order the values themselves)."""
    print(f"{what}: max err {err:.3g} ({'ok' if err <= tol else 'WRONG'}, tolerance {tol})")
    if not err <= tol:
        bad.append(what)


report("fused_add_rmsnorm 300x4096 residual", ok_r, 0.07)
report("fused_add_rmsnorm 300x4096 output", ok_x, 0.07)
out = sgl_kernel.rmsnorm(x, w, 1e-6)
report("rmsnorm 300x4096", (out.float() - rms(x, w)).abs().max().item(), 0.07)
g = torch.randn(300, 2 * 11008, device=dev, dtype=torch.bfloat16)
ref = torch.nn.functional.silu(g[:, :11008].float()) * g[:, 11008:].float()
from sglang.srt.layers.activation import silu_and_mul as sglang_silu_and_mul  # noqa: E402  (its JIT kernel)

o = sglang_silu_and_mul(g)
report("SGLang's silu_and_mul 300x11008 (JIT, relative)", ((o.float() - ref).abs() / (ref.abs() + 1)).max().item(), 0.02)
try:  # an sgl_kernel op the recipe did not rebuild must refuse, not compute with torch 2.14's layout
    sgl_kernel.silu_and_mul(g, torch.empty_like(o))
    bad.append("sgl_kernel.silu_and_mul ran (it should refuse)")
except RuntimeError as e:
    print(f"sgl_kernel.silu_and_mul refuses: {str(e)[:90]}...")
for mod in ["sglang.srt.layers.layernorm", "sglang.srt.layers.activation", "sglang.srt.models.llama",
            "sglang.srt.layers.attention.triton_backend", "sglang.srt.entrypoints.http_server",
            "sglang.srt.managers.scheduler"]:
    t = time.time()
    try:
        importlib.import_module(mod)
        print(f"import {mod}: ok ({time.time() - t:.1f} s)")
    except Exception as e:  # report and go on: the point is to list every gap in one device call
        print(f"import {mod}: {type(e).__name__}: {e}")
from importlib.metadata import entry_points  # noqa: E402

print("sglang.srt.plugins entry points:", [e.name + "=" + e.value for e in entry_points(group="sglang.srt.plugins")])
if bad:
    raise SystemExit(f"sgl_kernel computes wrong under torch {torch.__version__}: {', '.join(bad)}")
