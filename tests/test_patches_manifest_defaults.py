"""`patches add`'s default check shapes come from the op contract (issue 24), not from lists in each adapter: the
smallest contract shapes by bytes moved, so the first-call check in every server process stays cheap and runs on
shapes the harness checked every candidate on."""

from __future__ import annotations

import pytest

from astra_sglang.contract.op import load_manifest
from astra_sglang.harness.shared.suite import contract_bytes
from astra_sglang.patches.adapters import adapter_ops, get_adapter
from astra_sglang.patches.registry import op_folder


@pytest.mark.parametrize("op", [o for o in adapter_ops() if o != "decode_attention"])
def test_default_check_shapes_are_the_contracts_smallest(op: str):
    m = load_manifest(op_folder(op))
    shapes = get_adapter(op).default_check_shapes()
    assert len(shapes) == 3 and all(any(s == c.dims for c in m.shapes) for s in shapes)
    dtype = m.signature.dtypes[0]
    size = sorted(contract_bytes(m, c.dims, dtype) or 0 for c in m.shapes)
    assert max(contract_bytes(m, s, dtype) or 0 for s in shapes) <= size[min(len(size) - 1, 4)]


def test_decode_attention_keeps_its_own_small_pools():
    """Its contract's shapes hold KV pools of up to 32k tokens per request: its check shapes are its own (B 1..128,
    S <= 512), still inside the contract's dims."""
    shapes = get_adapter("decode_attention").default_check_shapes()
    assert all(s["S"] <= 512 for s in shapes)


def test_the_default_guard_spans_the_contracts_shapes_not_the_adapters_widest():
    """Without evidence a patch serves only sizes the contract's shapes reach: merge_state's adapter allows head
    dims 64..256 and T up to 65536, its contract's shapes have D 96..256 and T up to 16384."""
    from astra_sglang.patches.tooling.add import default_guard

    g = default_guard("merge_state")
    m = load_manifest(op_folder("merge_state"))
    for name in ("T", "NH", "D"):
        values = [s.dims[name] for s in m.shapes]
        assert (g.dims[name].min, g.dims[name].max) == (min(values), max(values)), name
    assert not g.accepts_dims({"T": 4, "NH": 8, "D": 64}) and g.accepts_dims({"T": 4, "NH": 8, "D": 128})
