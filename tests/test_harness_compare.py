"""Tolerances must not reject a correct kernel where the op cancels, and must still reject a wrong one.

Found on the H200: SGLang's own merge_state_triton failed its float32 check on 'wide' inputs (values up to 1e3
mixed into results near 0, error 4.9e-4 against rtol 1e-5 of the cancelled result).
"""

import importlib.util
from pathlib import Path

import torch

from astra_sglang.checker import compare, compare_to_reference, scale_key
from astra_sglang.contract.op import Tolerance, load_manifest

REPO = Path(__file__).resolve().parents[1]
TOL = Tolerance(atol=1e-5, rtol=1e-5)


def _mix(a: torch.Tensor, b: torch.Tensor, wa: torch.Tensor) -> torch.Tensor:
    return a * wa + b * (1 - wa)


def _cancelling_case():
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(4096, generator=gen) * 1e3
    wa = torch.rand(4096, generator=gen)
    b = -a * wa / (1 - wa)                            # a*wa + b*(1-wa) cancels to ~0
    exact = _mix(a.double(), b.double(), wa.double())
    one_order = _mix(a, b, wa)                        # float32, one valid order
    other_order = b + (a - b) * wa                    # float32, another valid order
    scale = torch.maximum(a.abs(), b.abs())
    return exact, one_order, other_order, scale


def test_different_valid_order_passes_with_the_reference_scale():
    exact, o, c, scale = _cancelling_case()
    assert compare("output", c, o, exact, TOL) is not None  # element-wise rtol alone rejects a correct kernel
    assert compare("output", c, o, exact, TOL, scale) is None
    assert compare_to_reference("output", o, exact, TOL, scale) is None


def test_a_wrong_result_still_fails_with_the_scale():
    exact, o, c, scale = _cancelling_case()
    wrong = c.clone()
    wrong[7] += 1.0  # far beyond eps * 1e3
    m = compare("output", wrong, o, exact, TOL, scale)
    assert m is not None and m.reason == "mismatch"


def test_merge_state_reference_hands_the_harness_a_scale_for_every_output():
    """The harness reads each output's scale under scale_key(name); a reference that returned it under any
    other key would silently fall back to element-wise rtol and reject correct kernels where merge_state
    cancels (the H200 finding above)."""
    op = REPO / "extracted" / "merge_state"  # its reference.py is ours and committed: no restore needed
    m = load_manifest(op)
    spec = importlib.util.spec_from_file_location("ms_reference", op / m.reference.path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    gen = torch.Generator().manual_seed(0)
    args = {"prefix_output": torch.randn(3, 2, 64, generator=gen) * 1e3, "prefix_lse": torch.randn(3, 2, generator=gen),
            "suffix_output": torch.randn(3, 2, 64, generator=gen) * 1e3, "suffix_lse": torch.randn(3, 2, generator=gen)}
    ref = getattr(mod, m.reference.function)(**args)
    names = {t.name for t in m.signature.tensors}
    outputs = [t.name for t in m.signature.tensors if t.role == "output"]
    assert outputs and all(scale_key(o) not in names for o in outputs)  # never mistaken for a tensor
    for o in outputs:
        assert ref[scale_key(o)].shape == ref[o].shape, o
    # and compare() uses it: a result off by rounding at the terms' size passes only with the scale
    scale = ref[scale_key("output")]
    out = ref["output"] + 0.5 * TOL.rtol * scale
    assert compare("output", out, ref["output"], ref["output"], TOL) is not None
    assert compare("output", out, ref["output"], ref["output"], TOL, scale) is None


def test_float16_overflow_matches_a_reference_above_the_range():
    ref = torch.tensor([70000.0, -1e6, 1.0])          # exact values; float16 holds +-inf for the first two
    out = ref.to(torch.float16)                        # what any correct float16 kernel stores
    tol = Tolerance(atol=2e-3, rtol=2e-3)
    assert compare_to_reference("out", out, ref, tol) is None
    assert compare("out", out.clone(), out, ref, tol) is None
    wrong = out.clone()
    wrong[0] = 65504.0                                 # saturating instead of overflowing is another function
    assert compare("out", wrong, out, ref, tol) is not None
