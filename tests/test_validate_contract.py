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
    assert main(["validate-contract", str(op), "--device", "cpu", "--record"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("merge_state: PASS |") and "on cpu (TRITON_INTERPRET=1)" in out
    passing = require_validated(op, "merge_state")
    assert passing.passed and passing.cases_run > 0 and passing.shape_set == "test"

    # a tampered reference: the original now disagrees with it, and the first failing case says where
    ref = op / "reference.py"
    good = ref.read_text()
    ref.write_text(good + "\n_real = reference\n\n\ndef reference(**args):\n    out = _real(**args)\n"
                   "    out['output'] = out['output'] * 1.5\n    return out\n")
    assert main(["validate-contract", str(op), "--device", "cpu", "--record"]) == 1
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


def test_a_declared_kernel_finding_is_confirmed_apart_and_kept_out_of_the_candidate_suite(op: Path, capsys) -> None:
    """An original that is wrong on one distribution (here a reference that disagrees only on all-zero inputs
    plays the kernel bug): undeclared, validation fails there; declared in the manifest, validation passes on
    the rest, re-runs the finding's cases on their own and says it reproduced; candidates are never judged on
    those cases (a faithful copy of the original must pass); once the kernel agrees, the finding is stale."""
    import json

    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.contract.op import load_manifest
    from astra_sglang.harness.shared.suite import build_suite

    ref = op / "reference.py"
    good = ref.read_text()
    ref.write_text(good + "\n_real = reference\n\n\ndef reference(**args):\n    out = _real(**args)\n"
                   "    if bool((args['prefix_output'] == 0).all()):\n        out['output'] = out['output'] + 1.0\n"
                   "    return out\n")
    assert main(["validate-contract", str(op), "--device", "cpu", "--record"]) == 1
    assert "distribution=zeros" in capsys.readouterr().out

    manifest = op / "manifest.json"
    data = json.loads(manifest.read_text())
    data["findings"] = [{"distribution": "zeros", "why": "test: plays a kernel bug on all-zero inputs"}]
    manifest.write_text(json.dumps(data, indent=2) + "\n")
    assert main(["validate-contract", str(op), "--device", "cpu", "--record"]) == 0
    line = capsys.readouterr().out
    assert line.startswith("merge_state: PASS (kernel finding on 'zeros' reproduced) |")
    v = require_validated(op, "merge_state")
    assert "zeros" not in v.distributions
    assert [(f.distribution, f.reproduced) for f in v.findings] == [("zeros", True)] and v.findings[0].cases_run > 0
    cases = build_suite(load_manifest(op), EvalConfig(shapes="test", device="cpu"), 1, None)
    assert cases and all(c.distribution != "zeros" for c in cases)

    ref.write_text(good)  # the kernel "fixed": the finding no longer reproduces, and the line says so
    assert main(["validate-contract", str(op), "--device", "cpu", "--record"]) == 0
    assert "(kernel finding on 'zeros' NOT reproduced: drop it from the manifest)" in capsys.readouterr().out
