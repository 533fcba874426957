"""``validate-contract`` on CPU: the original Triton kernel (merge_state, under TRITON_INTERPRET=1) against
its contract's reference; the record is pinned to the manifest, so a changed manifest needs a new one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from astra_sglang.cli.main import main
from astra_sglang.contract.validation import current_validation, read_validations, require_validated
from astra_sglang.errors import AstraError


@pytest.fixture()
def op(restored_op, tmp_path: Path) -> Path:
    dest = tmp_path / "merge_state"
    shutil.copytree(restored_op("merge_state"), dest, ignore=shutil.ignore_patterns("build", "validation.json"))
    return dest


def test_validate_contract_records_tampering_and_manifest_changes(op: Path, capsys) -> None:
    with pytest.raises(AstraError, match="merge_state: its contract is not validated"):
        require_validated(op, "merge_state")
    assert main(["validate-contract", str(op), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("merge_state: PASS |") and "on cpu (TRITON_INTERPRET=1)" in out
    passing = require_validated(op, "merge_state")
    assert passing.passed and passing.cases_run > 0 and passing.shape_set == "test"

    # a tampered reference: the original now disagrees with it, and the first failing case says where
    ref = op / "reference.py"
    good = ref.read_text()
    ref.write_text(good + "\n_real = reference\n\n\ndef reference(**args):\n    out = _real(**args)\n"
                   "    out['output'] = out['output'] * 1.5\n    return out\n")
    assert main(["validate-contract", str(op), "--device", "cpu"]) == 1
    line = capsys.readouterr().out.strip()
    assert line.startswith("merge_state: FAIL: reference mismatch at dims=") and "output" in line
    records = read_validations(op).validations  # type: ignore[union-attr]
    assert [v.passed for v in records] == [True, False]
    assert records[1].first_failure is not None and records[1].first_failure in line
    ref.write_text(good)

    # a changed manifest: the passing record was for the old one, so optimize would refuse it
    manifest = op / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"notes": [', '"notes": [\n    "edited",', 1))
    assert current_validation(op) is None
    with pytest.raises(AstraError, match="validate-contract merge_state"):
        require_validated(op, "merge_state")
