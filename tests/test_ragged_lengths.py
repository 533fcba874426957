"""The ragged-batch request lengths (catalog/_ragged_batch.py) that four serving-helper contracts build their inputs
from. A GPU timing builds up to 1000 rotation sets of a tiny op's inputs, so one set must cost milliseconds: the
tensor-element loop took ~0.7 s a set at B8 S2048, and the first GPU validation of compute_position_triton and
pack_verify_mask_into stopped with "no progress for 180 s during time" (H100, 2026-12-06)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from astra_sglang.extract.catalog._ragged_batch import _lengths

REPO = Path(__file__).resolve().parents[1]
OPS = ["compute_position_triton", "pack_verify_mask_into", "pad_draft_extend_query", "unpad_draft_extend_output"]


def _pair_moves(b: int, s: int, e: int, gen: torch.Generator) -> torch.Tensor:
    """The definition: start even, then move one token from j to i for each random pair (i, j) that keeps both
    in [1, s+e]."""
    lens = torch.full((b,), s, dtype=torch.int64)
    if b > 1 and (s > 1 or e > 0):
        for i, j in torch.randint(0, b, (4 * b * s, 2), generator=gen).tolist():
            if i != j and lens[i] < s + e and lens[j] > 1:
                lens[i] += 1
                lens[j] -= 1
    return lens


@pytest.mark.parametrize("b,s,e", [(1, 4, 0), (5, 2, 3), (64, 8, 24), (8, 512, 1536), (256, 2, 2)])
def test_lengths_are_the_pair_moves_of_their_definition(b: int, s: int, e: int) -> None:
    """The same seed gives the same lengths as before the speed-up: the recorded validations stay comparable."""
    got = _lengths(b, s, e, torch.Generator().manual_seed(7), "cpu")
    assert torch.equal(got, _pair_moves(b, s, e, torch.Generator().manual_seed(7)))
    assert got.dtype == torch.int64 and int(got.sum()) == b * s
    assert int(got.min()) >= 1 and int(got.max()) <= s + e


def test_twenty_timing_sets_of_the_largest_ragged_batch_take_well_under_a_few_seconds() -> None:
    """Twenty sets at B8 S2048 (E 3S, compute_position_triton's largest prefill): ~14 s with the tensor loop, ~0.2 s
    now; 4 s leaves a slow CI host twenty times the room."""
    gen = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    for _ in range(20):
        _lengths(8, 2048, 3 * 2048, gen, "cpu")
    assert time.perf_counter() - t0 < 4.0


@pytest.mark.parametrize("op", OPS)
def test_the_committed_inputs_use_the_fast_lengths(op: str) -> None:
    """The committed contracts carry the helper's text (FileText), so they time as fast as the catalog's."""
    text = (REPO / "extracted" / op / "inputs.py").read_text()
    assert "lens = [s] * b" in text and "torch.tensor(lens, dtype=torch.int64, device=device)" in text
