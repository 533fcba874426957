"""One checker: the server's first-call gate gives the harness's verdict, with the op manifest's tolerances.

The gate (``patches.runtime.check_against_original``) runs here exactly as in a server process, on the
adapter's own sample inputs; only the kernel is a chosen function, so its output can be placed just inside or
just outside a tolerance. The harness verdict is ``astra_sglang.checker.compare`` on the same outputs, the
call the harness worker makes for every case. Both cases below got opposite verdicts from the two before they
shared the checker (the gate had its own isclose with bf16 atol/rtol 2e-2 and no reference scale).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from astra_sglang.checker import compare_outputs
from astra_sglang.contract.op import manifest_sha256
from astra_sglang.contract.patch import (
    GuardSpec,
    PatchManifest,
    PatchSource,
    Provenance,
    ValidatedOn,
)
from astra_sglang.loader.launch import load_reference
from astra_sglang.patches import status
from astra_sglang.patches.adapters.base import dim_ranges
from astra_sglang.patches.registry import op_folder
from astra_sglang.patches.runtime import PatchRuntime, check_against_original

REPO = Path(__file__).resolve().parents[1]
SEED = 1234  # the gate's seed for the first check shape


def _runtime(tmp_path: Path, op: str, target: str, dtype: str, dims: dict[str, Any], monkeypatch) -> PatchRuntime:
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # a Triton patch serves CPU tensors under the interpreter
    monkeypatch.setenv("ASTRA_SGLANG_EXTRACTED_DIR", str(REPO / "extracted"))
    ranges = {k: (1, None, 1) for k in dims}
    m = PatchManifest(
        patch_id=f"gate-{op}", op=op, op_manifest_sha256=manifest_sha256(op_folder(op)),
        source=PatchSource(kind="triton", file="kernel.py"), targets=[target],
        validated_on=ValidatedOn(sglang_versions=["0.5.23"], archs=["cpu-interpret"]),
        guard=GuardSpec(dtypes=[dtype], dims=dim_ranges(**ranges), align_bytes=1), check_shapes=[dims],
        files=[], provenance=Provenance(kind="hand-written"))
    status.reset(m.patch_id)
    return PatchRuntime(tmp_path, m)


def _verdicts(rt: PatchRuntime, original, kernel, dims: dict[str, int], dtype: torch.dtype) -> tuple[bool, bool]:
    """(harness accepts, gate accepts) for the kernel on the gate's own sample inputs."""
    ad = rt.adapter
    a_o, k_o = ad.sample(dims, dtype, "cpu", SEED)
    a_p, k_p = ad.sample(dims, dtype, "cpu", SEED)
    a_r, k_r = ad.sample(dims, dtype, "cpu", SEED)
    p_r, p_p = ad.prepare(*a_r, **k_r), ad.prepare(*a_p, **k_p)
    assert p_r is not None and p_p is not None
    ref = load_reference(op_folder(rt.m.op), rt.op)(**p_r.args)
    orig = ad.outputs(a_o, k_o, original(*a_o, **k_o))
    got = ad.outputs(a_p, k_p, ad.launch(kernel, p_p))
    harness = compare_outputs(got, orig, ref, rt.op.tolerances[str(dtype).removeprefix("torch.")]) is None
    rt.kernel = kernel
    gate = check_against_original(rt, original, "cpu") is None
    return harness, gate


def _old_gate_accepts(got: torch.Tensor, orig: torch.Tensor, tol: float) -> bool:
    """The premise of each case: what the gate's own isclose (bf16 2e-2, no scale) said before."""
    return bool(torch.isclose(got.float(), orig.float(), atol=tol, rtol=tol).all())


def _silu(input, out=None, expert_ids=None, expert_step=1, **kw):
    d = input.shape[-1] // 2
    out = input.new_empty(*input.shape[:-1], d) if out is None else out
    return out.copy_(torch.nn.functional.silu(input[..., :d].float()) * input[..., d:].float())


def test_bf16_error_between_the_harness_and_the_old_server_tolerance_is_rejected_by_both(tmp_path, monkeypatch):
    dims = {"T": 4, "H": 64}
    rt = _runtime(tmp_path, "silu_and_mul", "sglang.kernels.ops.activation.activation.silu_and_mul", "bfloat16",
                  dims, monkeypatch)
    assert rt.op.tolerances["bfloat16"].rtol == pytest.approx(1.6e-2)

    def off_by_1_8_percent(a: dict[str, Any]) -> None:
        """Exact, except |error| = 1.8e-2 (1 + |x|) where |x| < 0.25 (fine bf16 steps there, so the stored error
        stays between the harness's 1.6e-2 and the old gate's 2e-2)."""
        o = _silu(a["input"]).float()
        small = o.abs() < 0.25
        a["out"].copy_(torch.where(small, o + 1.8e-2 * (1 + o.abs()), o))

    (x, out), _ = rt.adapter.sample(dims, torch.bfloat16, "cpu", SEED)
    off_by_1_8_percent({"input": x, "out": out})
    assert _old_gate_accepts(out, _silu(x), 2e-2)                   # the old gate let this patch serve
    assert _verdicts(rt, _silu, off_by_1_8_percent, dims, torch.bfloat16) == (False, False)


def _merge(prefix_output, prefix_lse, suffix_output, suffix_lse, output=None, output_lse=None):
    m = torch.maximum(prefix_lse, suffix_lse)
    p, s = torch.exp(prefix_lse - m), torch.exp(suffix_lse - m)
    out = prefix_output.float() * (p / (p + s)).unsqueeze(-1) + suffix_output.float() * (s / (p + s)).unsqueeze(-1)
    output = torch.empty_like(prefix_output) if output is None else output
    output_lse = torch.empty_like(prefix_lse) if output_lse is None else output_lse
    output.copy_(out)
    output_lse.copy_(torch.log(p + s) + m)
    return output, output_lse


def test_cancellation_error_within_the_reference_scale_is_accepted_by_both(tmp_path, monkeypatch):
    """merge_state mixes terms of size ~|v| into results near 0: rounding of any valid order scales with the
    terms (the reference's ``output:scale``), not with the cancelled result."""
    dims = {"T": 8, "NH": 4, "D": 64}
    rt = _runtime(tmp_path, "merge_state", "sglang.kernels.ops.attention.merge_state.merge_state_triton",
                  "float32", dims, monkeypatch)
    tol = rt.op.tolerances["float32"]

    def other_order(a: dict[str, Any]) -> None:  # a rounding error of 0.6 rtol * the terms' size
        out, lse = _merge(a["prefix_output"], a["prefix_lse"], a["suffix_output"], a["suffix_lse"])
        scale = torch.maximum(a["prefix_output"].abs(), a["suffix_output"].abs())
        a["output"].copy_(out + 0.6 * tol.rtol * scale)
        a["output_lse"].copy_(lse)

    args, _ = rt.adapter.sample(dims, torch.float32, "cpu", SEED)
    p = rt.adapter.prepare(*args)
    got = rt.adapter.launch(other_order, p)[0]
    assert not _old_gate_accepts(got, _merge(*args)[0], tol.rtol)   # the old gate refused a correct kernel
    assert _verdicts(rt, _merge, other_order, dims, torch.float32) == (True, True)
