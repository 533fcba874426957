"""The originals of the MoE / FP8 contracts: they build for sm_90a here, and agree with their references there.

The GPU test is the contract's acceptance test (validate-contract on every manifest shape x dtype x distribution);
per_token_quant_fp8 passes it outside its declared kernel finding ('zeros': the one-CTA kernel quantizes an
all-zero row to 448), which validation re-runs on its own and must see reproduce.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_sglang.contract.op import load_manifest
from astra_sglang.extract import catalog
from astra_sglang.extract.extractor import write_op

OPS = {"moe.moe_align_block_size": "int32", "quantization.sgl_per_token_quant_fp8": "bfloat16",
       "quantization.per_token_group_quant": "bfloat16"}
FOLDERS = {"moe.moe_align_block_size": "moe_align_block_size",
           "quantization.sgl_per_token_quant_fp8": "per_token_quant_fp8",
           "quantization.per_token_group_quant": "per_token_group_quant_fp8"}


def _extract(op_id: str, tmp_path: Path) -> Path:
    entry = catalog.find(op_id)
    assert entry is not None
    return write_op(entry, tmp_path).path


@pytest.mark.nvcc
@pytest.mark.parametrize("op_id", sorted(OPS))
def test_original_compiles_for_sm90a(op_id: str, tmp_path: Path) -> None:
    from astra_sglang.loader.cuda_build import build_cuda_module

    op = _extract(op_id, tmp_path)
    built = build_cuda_module(op, load_manifest(op), OPS[op_id], load=False)
    assert built.report.ok and built.report.resources


def test_the_gpu_test_validates_the_committed_contract_of_each_op(restored_op) -> None:
    assert {load_manifest(restored_op(f)).op_id for f in FOLDERS.values()} == set(FOLDERS) == set(OPS)


@pytest.mark.gpu
@pytest.mark.parametrize("op_id", sorted(OPS))
def test_contract_validates_on_the_gpu(op_id: str, restored_op) -> None:
    """The committed contract under extracted/ (SGLang's files restored and pinned), as the device has it: it has
    no SGLang to extract from (ModuleNotFoundError there, 2026-12-06); that the committed one is what extract
    writes is test_extract_idempotent's."""
    from astra_sglang.harness import validate_contract, validation_config

    v, _ = validate_contract(restored_op(FOLDERS[op_id]), validation_config("cuda"))
    assert v.passed, v.first_failure
    if op_id == "quantization.sgl_per_token_quant_fp8":
        assert [(f.distribution, f.reproduced) for f in v.findings] == [("zeros", True)], v.findings
    if op_id == "moe.moe_align_block_size":
        assert all(err == 0.0 for err, _ in v.max_error.values())  # integer outputs: exact
