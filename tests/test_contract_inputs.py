"""Structured inputs and contract validation: what an op with index tensors relies on."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from h_fixtures.ops import make_h_gather

from astra_sglang.contract.eval_config import EvalConfig
from astra_sglang.contract.op import load_manifest
from astra_sglang.contract.validation import current_validation, record_validation, require_validated
from astra_sglang.errors import AstraError
from astra_sglang.harness import evaluate, validate_contract, validation_config
from astra_sglang.harness.shared.tensors import ArgSet
from astra_sglang.loader.launch import load_inputs


@pytest.fixture(autouse=True)
def _interpret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def test_generated_tensors_come_from_the_ops_inputs_py_reproducibly(tmp_path: Path) -> None:
    op = make_h_gather(tmp_path)
    m = load_manifest(op)
    dims = {"N": 8, "S": 8, "D": 4}

    def drawn(seed: int) -> torch.Tensor:
        a = ArgSet(m, dims, "float32", "cpu", load_inputs(op, m))
        a.fill("normal", torch.Generator().manual_seed(seed))
        return a.tensors["index"].view.clone()

    first = drawn(1)
    assert sorted(first.tolist()) == list(range(8))  # a permutation: distinct slots, not random integers
    assert torch.equal(first, drawn(1))
    assert any(not torch.equal(first, drawn(s)) for s in range(2, 6))


def test_a_generator_that_breaks_the_declared_shape_is_one_clear_error(tmp_path: Path) -> None:
    bad = "import torch\n\ndef make_inputs(dims, dtype, gen, device):\n    return {'index': torch.zeros(2, dtype=torch.int32)}\n"
    op = make_h_gather(tmp_path, inputs=bad)
    m = load_manifest(op)
    a = ArgSet(m, {"N": 3, "S": 8, "D": 4}, "float32", "cpu", load_inputs(op, m))
    with pytest.raises(ValueError, match=r"inputs.py gave 'index' as \(2,\), the signature says \(3,\)"):
        a.fill("normal", torch.Generator().manual_seed(0))


def test_cases_the_original_refuses_are_named_in_the_result(tmp_path: Path) -> None:
    """The notes of skipped cases used to be lost (the result model copied the list before they were added)."""
    res = evaluate(make_h_gather(tmp_path), None, EvalConfig(shapes="test", device="cpu", seed=3))
    assert res.correctness is not None and res.correctness.ok
    assert res.correctness.skipped_cases > 0
    assert any("float16 tables are not supported" in n for n in res.correctness.notes)


def test_validation_passes_is_recorded_and_a_changed_manifest_invalidates_it(tmp_path: Path) -> None:
    op = make_h_gather(tmp_path)
    v, _ = validate_contract(op, validation_config("cpu"))
    assert v.passed and v.cases_run > 0 and v.device_kind == "cpu"
    assert v.max_error["out"] == (0.0, 0.0)  # a gather is exact
    record_validation(op, "test.h_gather", v)
    assert require_validated(op, "h_gather") == v
    m = load_manifest(op)
    (op / "manifest.json").write_text(m.model_copy(update={"notes": ["edited"]}).model_dump_json(indent=2))
    assert current_validation(op) is None
    with pytest.raises(AstraError, match="validate-contract h_gather"):
        require_validated(op, "h_gather")


def test_a_reference_that_disagrees_with_the_kernel_fails_validation_with_the_case(tmp_path: Path) -> None:
    op = make_h_gather(tmp_path)
    wrong = "def reference(**args):\n    return {'out': args['table'].float()[:args['index'].numel()]}\n"
    (op / "reference.py").write_text(wrong)  # the first rows, not the indexed ones
    v, _ = validate_contract(op, validation_config("cpu"))
    assert not v.passed
    assert v.first_failure is not None and "reference mismatch" in v.first_failure and "dims=" in v.first_failure

