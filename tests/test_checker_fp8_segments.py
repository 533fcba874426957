"""What the checker must accept and reject for fp8 outputs and for outputs whose order the op leaves undefined.

fp8 (quantization kernels): an unwritten element must read as NaN, not as a finite value; two valid kernels
whose float32 scales differ in the last bit store neighbouring fp8 codes, so one fp8 ulp passes and two do not.
Segments (moe_align's atomics): token ids permuted within one expert are the same answer; a token in the wrong
expert is not; a scratch element the op does not define is never compared.
"""

import torch

from astra_sglang.checker import (
    canonical,
    compare,
    compare_outputs,
    compare_to_reference,
    fill_poison,
    is_poison,
    segments_key,
    tolerance_used,
)
from astra_sglang.contract.op import Tolerance

FP8 = torch.float8_e4m3fn
BF16_TOL = Tolerance(atol=1.6e-2, rtol=1.6e-2)
EXACT = Tolerance(atol=0.0, rtol=0.0)


def _codes(*values: float) -> torch.Tensor:
    return torch.tensor(values).to(FP8)


def _next_code(x: torch.Tensor, steps: int) -> torch.Tensor:
    """``x`` moved by ``steps`` fp8 codes away from zero (positive values: the bit pattern + steps)."""
    return (x.view(torch.uint8) + steps).view(FP8)


def test_fp8_poison_is_nan_so_reads_past_the_end_show():
    x = torch.empty(8, dtype=FP8)
    fill_poison(x)
    assert torch.isnan(x.float()).all()
    assert is_poison(x).all()
    written = _codes(1.0, -88.0, 448.0)
    assert not is_poison(written).any()  # every finite value, the old -88 poison included, is a real write


def test_fp8_output_left_unwritten_is_named():
    orig = _codes(1.0, 2.0, 3.0, 4.0)
    cand = orig.clone()
    fill_poison(cand[2:])
    m = compare("q", cand, orig, orig.float(), BF16_TOL)
    assert m is not None and m.reason == "unwritten output" and m.count == 2


def test_fp8_one_ulp_passes_two_fail():
    ref = torch.tensor([1.0, 3.0, 100.0, 0.3, 0.005])  # normal values and a subnormal (below 2^-6)
    orig = ref.to(FP8)
    one = _next_code(orig, 1)
    two = _next_code(orig, 2)
    assert compare("q", one, orig, ref, BF16_TOL) is None
    assert compare_to_reference("q", one, ref, BF16_TOL) is None
    assert tolerance_used(one, ref, BF16_TOL)[1] <= 1.0
    m = compare("q", two, orig, ref, BF16_TOL)
    assert m is not None and m.reason == "mismatch"
    assert compare_to_reference("q", two, ref, BF16_TOL) is not None


def test_permutation_within_a_segment_passes_only_with_segments():
    orig = torch.tensor([3, 0, 7, 7, 5, 2, 7, 7], dtype=torch.int32)
    cand = torch.tensor([0, 3, 7, 7, 2, 5, 7, 7], dtype=torch.int32)
    seg = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    ref = torch.tensor([0, 3, 7, 7, 2, 5, 7, 7])
    assert compare("ids", cand, orig, ref, EXACT) is not None
    assert compare("ids", cand, orig, ref, EXACT, segments=seg) is None
    assert compare_to_reference("ids", orig, ref, EXACT, segments=seg) is None
    assert tolerance_used(orig, ref, EXACT, segments=seg) == (0.0, 0.0)
    assert compare_outputs({"ids": cand}, {"ids": orig}, {"ids": ref, segments_key("ids"): seg}, EXACT) is None


def test_a_value_in_the_wrong_segment_fails():
    orig = torch.tensor([3, 0, 7, 7, 5, 2, 7, 7], dtype=torch.int32)
    cand = torch.tensor([3, 5, 7, 7, 0, 2, 7, 7], dtype=torch.int32)  # 0 and 5 swapped across segments
    seg = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    assert compare("ids", cand, orig, None, EXACT, segments=seg) is not None
    assert compare_to_reference("ids", cand, orig.float(), EXACT, segments=seg) is not None


def test_undefined_elements_are_not_compared_but_defined_ones_are():
    orig = torch.tensor([4, 9, 1, 2], dtype=torch.int32)
    seg = torch.tensor([0, 1, -1, -1])  # the last two are scratch
    assert compare("buf", torch.tensor([4, 9, 77, -5], dtype=torch.int32), orig, None, EXACT, segments=seg) is None
    assert compare("buf", torch.tensor([4, 8, 1, 2], dtype=torch.int32), orig, None, EXACT, segments=seg) is not None


def test_canonical_keeps_segment_positions_when_segments_interleave():
    x = torch.tensor([9, 1, 8, 2])
    seg = torch.tensor([0, 1, 0, 1])
    assert canonical(x, seg).tolist() == [8, 1, 9, 2]
