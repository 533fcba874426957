"""The serving-path helper contracts (KV-slot lookups, ragged layouts, argmax samplers, speculative and MoE
routing helpers, copies): each original Triton kernel, extracted stand-alone, agrees with its contract on
CPU (TRITON_INTERPRET=1), a wrong reference is refused, and the committed folders are the extractor's output
with a passing validation record."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("sglang")
import torch  # noqa: E402

from astra_sglang.contract.validation import current_validation  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

# one op per catalog family (the fastest under the interpreter), then the other ops of the families
FAMILY_OPS = ["get_last_loc_triton", "div_argmax", "compute_position_triton", "fill_padded_rows",
              "pack_verify_mask_into", "pad_verify_lens_to_bucket_triton", "pair_to_row_map", "gather_spec_extras",
              "gemma_routing_post_topk", "concat_and_cast_mha_k_triton", "memcpy_triton",
              "q8kv8_topk_length_from_indices", "shuffle_rows_with_scales"]
OTHER_OPS = ["get_last_loc_triton_safe", "row_argmax", "pad_draft_extend_query", "unpad_draft_extend_output",
             "draft_topk1_postprocess", "moe_align_single_token"]
ALL_OPS = FAMILY_OPS + OTHER_OPS


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from astra_sglang.extract.extractor import extract

    root = tmp_path_factory.mktemp("extracted")
    extract(ALL_OPS, root)
    return root


@pytest.fixture
def interpret(monkeypatch: pytest.MonkeyPatch) -> None:
    # the checker runs in a subprocess: it reads TRITON_INTERPRET when the kernel module executes there
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _validate(op: Path):
    from astra_sglang.harness import validate_contract, validation_config

    config = validation_config("cpu").model_copy(update={"distributions": ["normal"]})
    v, _ = validate_contract(op, config)
    return v


@pytest.mark.parametrize("name", FAMILY_OPS)
def test_original_kernel_agrees_with_its_contract(out: Path, interpret: None, name: str) -> None:
    v = _validate(out / name)
    assert v.passed, v.first_failure
    assert v.cases_run > 0 and v.cases_skipped == 0


def test_a_wrong_reference_is_refused(out: Path, interpret: None, tmp_path: Path) -> None:
    # an off-by-one a plausible draft could make: the slot *at* prefix_len instead of the last one before it
    op = tmp_path / "get_last_loc_triton"
    shutil.copytree(out / "get_last_loc_triton", op)
    ref = op / "reference.py"
    ref.write_text(ref.read_text().replace("(p - 1).clamp(min=0)", "p.clamp(max=table.shape[1] - 1)"))
    v = _validate(op)
    assert not v.passed
    assert v.first_failure and "last_loc" in v.first_failure


@pytest.mark.parametrize("name", ALL_OPS)
def test_committed_folder_is_current_and_validated(out: Path, name: str) -> None:
    committed = REPO / "extracted" / name
    fresh = json.loads((out / name / "manifest.json").read_text())
    assert json.loads((committed / "manifest.json").read_text()) == fresh, "re-extract and re-validate this op"
    for f in ("reference.py", "inputs.py"):
        if (out / name / f).exists():
            assert (committed / f).read_text() == (out / name / f).read_text()
    assert current_validation(committed) is not None, "no passing validation.json record for this manifest"


def _inputs(out: Path, name: str):
    from astra_sglang.contract.op import load_manifest
    from astra_sglang.loader.launch import load_inputs

    return load_inputs(out / name, load_manifest(out / name))


@pytest.mark.parametrize("dims", [{"B": 1, "S": 1, "E": 0, "H": 1, "D": 1}, {"B": 7, "S": 3, "E": 2, "H": 1, "D": 1},
                                  {"B": 40, "S": 1, "E": 5, "H": 1, "D": 1}, {"B": 2, "S": 9, "E": 0, "H": 1, "D": 1}])
def test_ragged_batches_are_valid_for_any_legal_dims(out: Path, dims: dict[str, int]) -> None:
    # every held-out dims combination must be a real batch: 1 <= len <= S+E, sum = B*S, cu = prefix sums
    make, _ = _inputs(out, "pad_draft_extend_query")
    assert make is not None
    got = make(dims, "bfloat16", torch.Generator().manual_seed(3), "cpu")
    lens, cu = got["seq_lens_q"].long(), got["cu_seqlens_q"].long()
    assert int(lens.sum()) == dims["B"] * dims["S"]
    assert int(lens.min()) >= 1 and int(lens.max()) <= dims["S"] + dims["E"]
    assert cu[0] == 0 and torch.equal(cu[1:], torch.cumsum(lens, 0))
    if dims["B"] > 1 and dims["S"] > 1 and dims["E"] > 0:  # with S = 1 every length must be 1
        assert int(lens.max()) > int(lens.min()), "mixed lengths expected"


@pytest.mark.gpu
@pytest.mark.parametrize("name", ALL_OPS)
def test_original_kernel_agrees_with_its_contract_on_gpu(restored_op, name: str) -> None:
    # every manifest shape (the CPU run covers only tiny ones; e.g. row_argmax's rows > 64 path runs only here)
    from astra_sglang.harness import validate_contract, validation_config

    v, _ = validate_contract(restored_op(name), validation_config("cuda"))
    assert v.passed, v.first_failure
    assert v.cases_run > 0
