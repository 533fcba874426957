"""`extract --list` inventories the installed SGLang and says why an op cannot be extracted."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("sglang")

from astra_sglang.extract.discovery import list_ops  # noqa: E402


@pytest.fixture(scope="module")
def infos():
    return list_ops()


def test_lists_at_least_400_ops(infos) -> None:
    assert len(infos) >= 400
    assert len({i.op_id for i in infos}) == len(infos)


def test_paper_ops_are_listed_extractable_with_their_kind(infos) -> None:
    by_id = {i.op_id: i for i in infos}
    silu = by_id["activation.silu_and_mul"]
    assert silu.extractable and silu.source_kind == "cuda_jit" and silu.torch_reference and silu.fused_op
    assert "elementwise/activation.cuh" in silu.sources
    norm = by_id["layernorm.fused_add_rmsnorm"]  # not registered: op_id_of(its entry point), one form
    assert norm.extractable and not norm.registered and "elementwise/fused_add_rmsnorm.cuh" in norm.sources
    assert norm.entry_point == "sglang.kernels.ops.layernorm.norm:fused_add_rmsnorm"
    merge = by_id["attention.merge_state_triton"]
    assert merge.extractable and merge.source_kind == "triton"


def test_every_refusal_has_a_reason(infos) -> None:
    refused = [i for i in infos if not i.extractable]
    assert refused and all(i.reason for i in refused)
    kinds = {i.source_kind for i in refused}
    assert {"cuda_jit", "triton", "compiled_only"} <= kinds
    assert any("SGLang imports cannot be vendored" in i.reason for i in refused)


def test_cli_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    from astra_sglang.cli.main import main

    assert main(["extract", "--list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) >= 400 and {"op_id", "backends", "source_kind", "extractable", "reason"} <= set(rows[0])
