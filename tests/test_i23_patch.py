"""The decode_attention adapter: which of SGLang's calls a decode_attention patch may serve, on host metadata only.

The calls are SGLang 0.5.23's own: ``TritonAttnBackend.forward_decode`` passes every keyword below for each decode
batch, eager and under CUDA-graph capture; its DCP path passes a float32 ``o``. Prepare runs on the hot path, inside
capture, so it must not read device memory: the tests run it on meta tensors, where any read raises.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from astra_sglang.patches.adapters import adapter_ops, get_adapter, make_guard  # noqa: E402
from astra_sglang.patches.adapters.decode_attention import DecodeAttentionAdapter  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BF16 = torch.bfloat16


def batch(device: str = "meta", b: int = 4, nk: int = 2, g: int = 4, d: int = 64, slots: int = 300,
          graph_rows: int = 0, dtype: Any = BF16) -> dict[str, Any]:
    """The tensors forward_decode passes; ``graph_rows`` > b sizes the workspace as SGLang's CUDA-graph buffers
    (for the largest captured batch), of which a batch uses the first rows."""
    rows = max(b, graph_rows)
    nq = nk * g
    return {
        "q": torch.empty(b, nq, d, dtype=dtype, device=device),
        "k_buffer": torch.empty(slots, nk, d, dtype=dtype, device=device),
        "v_buffer": torch.empty(slots, nk, d, dtype=dtype, device=device),
        "o": torch.empty(b, nq, d, dtype=dtype, device=device),
        "kv_indptr": torch.empty(rows + 1, dtype=torch.int32, device=device),
        "kv_indices": torch.empty(slots * 4, dtype=torch.int64, device=device),
        "attn_logits": torch.empty(rows, nq, 8, d, dtype=torch.float32, device=device),
        "attn_lse": torch.empty(rows, nq, 8, dtype=torch.float32, device=device),
        "num_kv_splits": torch.empty(rows, dtype=torch.int32, device=device),
    }


def forward_decode_call(t: dict[str, Any], page_size: int = 1, **over: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """(args, kwargs) exactly as TritonAttnBackend.forward_decode calls decode_attention_fwd (LLaMA: no cap, no
    sinks, xai_temperature_len -1, k/v descale 1.0, use_pdl False as on a host without PDL)."""
    args = (t["q"], t["k_buffer"], t["v_buffer"], t["o"], t["kv_indptr"], t["kv_indices"], t["attn_logits"],
            t["attn_lse"], t["num_kv_splits"], 8, 1 / math.sqrt(t["q"].shape[2]), 1.0, 1.0)
    kwargs: dict[str, Any] = dict(logit_cap=0.0, sinks=None, xai_temperature_len=-1, has_mla=False, use_pdl=False,
                                  page_size=page_size, score_mod=None, aux_tensors=None, enable_lean=False,
                                  lean_Mp=None, lean_Lp=None, lean_Op=None, lean_locks=None, uneven_batch=None)
    kwargs.update(over)
    return args, kwargs


@pytest.mark.parametrize("page_size", [1, 16])
def test_accepts_forward_decodes_exact_call_with_the_contract_names_and_dims(page_size):
    ad = get_adapter("decode_attention")
    assert isinstance(ad, DecodeAttentionAdapter)
    t = batch()
    args, kwargs = forward_decode_call(t, page_size=page_size)
    p = ad.prepare(*args, **kwargs)
    assert p is not None
    assert list(p.args) == [*ad.tensor_names, *ad.scalar_names]
    assert p.dims == {"B": 4, "NK": 2, "G": 4, "D": 64, "MS": 8, "P": page_size, "QS": 0}
    assert "S" not in p.dims and "X" not in p.dims  # not knowable without a device read (module docstring)
    assert p.args["page_size"] == page_size and p.args["max_kv_splits"] == 8
    assert p.args["sm_scale"] == pytest.approx(1 / 8)
    assert p.args["q"] is t["q"] and p.args["o"] is t["o"]


def test_graph_sized_workspace_is_passed_as_the_batchs_rows():
    """Under CUDA graphs SGLang passes attn_logits/attn_lse/kv_indptr/num_kv_splits sized for the largest batch."""
    ad = DecodeAttentionAdapter()
    t = batch(device="cpu", b=3, graph_rows=160)
    p = ad.prepare(*forward_decode_call(t)[0], **forward_decode_call(t)[1])
    assert p is not None
    a = p.args
    assert a["attn_logits"].shape == (3, 8, 8, 64) and a["attn_lse"].shape == (3, 8, 8)
    assert a["kv_indptr"].shape == (4,) and a["num_kv_splits"].shape == (3,)
    for name in ("attn_logits", "attn_lse", "kv_indptr", "num_kv_splits"):  # views of the same memory
        assert a[name].data_ptr() == t[name].data_ptr() and a[name].is_contiguous()


def test_prepare_and_guard_read_no_device_memory():
    """Meta tensors have shapes, dtypes and strides but no data: item(), tolist() and bool() raise on them."""
    t = batch(graph_rows=64)
    with pytest.raises((RuntimeError, NotImplementedError)):
        t["kv_indptr"][-1].item()
    ad = DecodeAttentionAdapter()
    args, kwargs = forward_decode_call(t, page_size=16, enable_lean=True, lean_locks=torch.empty(8, device="meta"))
    p = ad.prepare(*args, **kwargs)
    assert p is not None
    assert make_guard(ad.default_guard(), "meta")(p)


def test_enable_lean_is_refused_only_where_sglang_takes_the_lean_path():
    """On CUDA decode_attention_fwd ignores enable_lean, and forward_decode's capture policy sets it for every
    captured batch >= 16 of LLaMA-3-8B: refusing it there would leave the patch out of every graph that counts."""
    t = batch()
    args, kwargs = forward_decode_call(t, enable_lean=True, lean_locks=torch.empty(8, device="meta"))
    cuda = DecodeAttentionAdapter()
    cuda._hip = False
    assert cuda.prepare(*args, **kwargs) is not None
    hip = DecodeAttentionAdapter()
    hip._hip = True  # ROCm: the original would run the Lean kernel
    assert hip.prepare(*args, **kwargs) is None
    assert hip.prepare(*forward_decode_call(t, enable_lean=False)[0], **forward_decode_call(t, enable_lean=False)[1])


def _refused_forms() -> list[Any]:
    def kw(**over: Any) -> Any:
        return lambda t: forward_decode_call(t, **over)

    def tensors(**over: Any) -> Any:
        def make(t: dict[str, Any]) -> Any:
            t = {**t, **{k: v(t) for k, v in over.items()}}
            return forward_decode_call(t)
        return make

    def scalars(i: int, value: Any) -> Any:
        def make(t: dict[str, Any]) -> Any:
            args, kwargs = forward_decode_call(t)
            return args[:i] + (value,) + args[i + 1:], kwargs
        return make

    fp8 = torch.float8_e4m3fn
    return [
        pytest.param(kw(logit_cap=30.0), id="logit_cap"),
        pytest.param(kw(sinks=torch.empty(8, device="meta")), id="sinks"),
        pytest.param(kw(xai_temperature_len=1024), id="xai_temperature_len"),
        pytest.param(kw(has_mla=True), id="has_mla"),
        pytest.param(kw(score_mod=object()), id="score_mod"),
        pytest.param(kw(aux_tensors=(torch.empty(1, device="meta"),)), id="aux_tensors"),
        pytest.param(scalars(11, 0.5), id="k_scale"),
        pytest.param(scalars(12, 0.5), id="v_scale"),
        pytest.param(scalars(11, torch.ones((), device="meta")), id="k_scale_tensor"),
        pytest.param(tensors(k_buffer=lambda t: t["k_buffer"].to(fp8), v_buffer=lambda t: t["v_buffer"].to(fp8)),
                     id="fp8_kv"),
        pytest.param(tensors(q=lambda t: t["q"].float(), o=lambda t: t["o"].float(),
                             k_buffer=lambda t: t["k_buffer"].float(), v_buffer=lambda t: t["v_buffer"].float()),
                     id="float32"),
        pytest.param(tensors(o=lambda t: t["o"].float()), id="dcp_float32_o"),
        pytest.param(tensors(k_buffer=lambda t: t["k_buffer"].unflatten(0, (30, 10))), id="4d_k_buffer"),
        pytest.param(tensors(v_buffer=lambda t: torch.empty(300, 2, 32, dtype=BF16, device="meta")),
                     id="v_head_dim_differs"),
        pytest.param(tensors(attn_logits=lambda t: torch.empty(4, 8, 16, 64, device="meta")), id="logits_splits_not_ms"),
        pytest.param(tensors(kv_indices=lambda t: t["kv_indices"].int()), id="int32_kv_indices"),
        pytest.param(kw(enable_lean=True, lean_locks=torch.empty(8, device="meta")), id="lean_on_hip"),
    ]


@pytest.mark.parametrize("form", _refused_forms())
def test_every_call_form_outside_the_contract_goes_to_the_original(form):
    ad = DecodeAttentionAdapter()
    ad._hip = True  # lean_on_hip; the other forms are refused on CUDA too (checked below)
    t = batch()
    args, kwargs = form(t)
    assert ad.prepare(*args, **kwargs) is None
    ad._hip = False
    if kwargs.get("enable_lean") is not True:
        assert ad.prepare(*args, **kwargs) is None


def test_a_row_strided_q_is_served_as_it_is_where_the_contract_checks_that_layout():
    """LLaMA on CUDA passes q as a view of the fused qkv projection (row stride q_size + 2 * kv_size). The contract
    checks that layout (dim QS = 1), so the kernel gets q as it is: the contiguous copy the adapter made before
    cost 2.8 us a layer at batch 128 (H100, 2026-12-06). Under a contract without QS, or with another row stride,
    q still reaches the kernel as a contiguous copy (same values), never as a layout nothing checked. A view whose
    heads are not whole rows is the original's."""
    ad = DecodeAttentionAdapter()
    contract = json.loads((REPO / "extracted" / "decode_attention" / "manifest.json").read_text())
    assert ad._checks_qkv_rows() == any(d["name"] == "QS" for d in contract["signature"]["dims"])
    nq, nk, d, b = 8, 2, 64, 4
    t = batch(device="cpu", b=b, nk=nk, g=nq // nk, d=d)
    for pad, contract_has_qs, copied in ((0, True, False), (0, False, True), (d, True, True)):
        ad._qkv_rows = contract_has_qs
        qkv = torch.randn(b, (nq + 2 * nk) * d + pad).to(BF16)
        q = qkv[:, : nq * d].reshape(-1, nq * d).view(-1, nq, d)  # forward_decode's reshape + view
        assert not q.is_contiguous()
        t["q"] = q
        args, kwargs = forward_decode_call(t)
        p = ad.prepare(*args, **kwargs)
        assert p is not None and make_guard(ad.default_guard(), "cpu")(p)
        assert p.dims["QS"] == (0 if copied else 1)
        seen: list[Any] = []
        ad.launch(lambda a, seen=seen: seen.append(a["q"]), p)
        assert torch.equal(seen[0], q)
        assert (seen[0] is not q and seen[0].is_contiguous()) if copied else seen[0] is q
    t["q"] = torch.randn(b, d, nq).to(BF16).transpose(1, 2)  # heads strided inside a row: not taken
    args, kwargs = forward_decode_call(t)
    assert ad.prepare(*args, **kwargs) is None


def test_the_first_call_check_can_sample_q_as_llama_passes_it():
    """A check shape with QS = 1 samples q as a view of qkv rows, so the load-time check runs the served layout."""
    ad = DecodeAttentionAdapter()
    dims = {"B": 3, "S": 9, "NK": 2, "G": 2, "D": 16, "P": 4, "R": 2, "X": 1, "KX": 0, "MS": 8}
    q0 = ad.sample(dims, torch.float16, "cpu", 5)[0][0]
    q1 = ad.sample({**dims, "QS": 1}, torch.float16, "cpu", 5)[0][0]
    assert q0.is_contiguous() and q1.stride(0) == (4 + 2 * 2) * 16 and torch.equal(q0, q1)


def test_each_check_shape_is_checked_in_the_form_a_graph_captured_llama_server_calls_it():
    """Check shapes are written in the eager form (QS 0, KX 0); the served form (q in the qkv rows, the whole graph
    kv_indices buffer) is added, and a shape already in it is not doubled."""
    ad = DecodeAttentionAdapter()
    eager = {"B": 3, "S": 9, "NK": 2, "G": 2, "D": 16, "P": 4, "R": 2, "X": 1, "KX": 0, "MS": 8, "QS": 0}
    forms = ad.served_forms(eager)
    assert forms == [eager, {**eager, "QS": int(ad._checks_qkv_rows()), "KX": 27}]
    assert ad.served_forms(forms[1]) == [forms[1]]
    args, _ = ad.sample(forms[1], torch.float16, "cpu", 5)
    assert args[5].numel() == 2 * 27 and args[0].is_contiguous() != ad._checks_qkv_rows()


def test_a_kv_pool_past_the_offsets_any_contract_shape_reached_is_sglangs(caplog):
    """A server whose per-layer KV buffer passes 2^31 elements (2.1M token slots x 8 heads x 128 dims; a hybrid model
    with few attention layers reaches it on an H200) is where a kernel computing KV offsets in int32 wraps, and no
    contract shape reaches it (the largest pool is ~2^28 elements), so no candidate was ever checked there:
    SGLang's kernel serves it. One slot fewer is served. Host metadata only (meta tensors)."""
    ad = DecodeAttentionAdapter()
    assert ad._checked_span() == (1 << 31) - 1
    nk, d = 8, 128
    most = ((1 << 31) - 1) // (nk * d)  # the most token slots whose buffer stays inside int32 offsets
    for slots, served in ((most, True), (most + 1, False)):
        t = batch(nk=nk, d=d, slots=slots)
        args, kwargs = forward_decode_call(t)
        p = ad.prepare(*args, **kwargs)
        assert (p is not None and make_guard(ad.default_guard(), "meta")(p)) == served, slots
    ad.prepare(*args, **kwargs)
    said = [r.getMessage() for r in caplog.records if "KV buffer" in r.getMessage()]
    assert len(said) == 1 and f"{(most + 1) * nk * d} elements" in said[0]  # once a process, with why


def test_the_kv_bound_stands_where_the_contract_cannot_be_read(monkeypatch):
    """The bound's fallback, not a failed patch: where the op contract's modules cannot be imported in the server's
    process (a trimmed install), the bound is 2^31 - 1 and the call is judged, where an ImportError outside the
    fallback once turned the whole patch off with "exception in the guard" (2026-12-08 review)."""
    import sys

    monkeypatch.setitem(sys.modules, "astra_sglang.harness.shared.suite", None)  # import fails
    ad = DecodeAttentionAdapter()
    assert ad._checked_span() == (1 << 31) - 1
    args, kwargs = forward_decode_call(batch(nk=8, d=128, slots=1024))
    assert ad.prepare(*args, **kwargs) is not None


def test_adapter_names_are_the_contracts_signature():
    """The runtime refuses a patch whose adapter passes other names than the op signature (page_size included)."""
    manifest = json.loads((REPO / "extracted" / "decode_attention" / "manifest.json").read_text())
    names = [t["name"] for t in manifest["signature"]["tensors"]] + [s["name"] for s in manifest["signature"]["scalars"]]
    if "page_size" not in names:
        pytest.xfail("the contract revision that adds the page_size scalar has not landed in extracted/decode_attention")
    ad = DecodeAttentionAdapter()
    assert names == [*ad.tensor_names, *ad.scalar_names]


@pytest.mark.parametrize("op", adapter_ops())
def test_an_adapter_s_widest_guard_stays_inside_its_op_contract(op):
    """decode_attention's guard took G up to 64 where its contract (and SGLang's grouped kernel) is right only up
    to 16: a patch checked inside the contract must never be served outside it."""
    from astra_sglang.contract.op import load_manifest

    dims = {d.name: d for d in load_manifest(Path(__file__).resolve().parent.parent / "extracted" / op).signature.dims}
    for name, r in get_adapter(op).default_guard().dims.items():
        d = dims.get(name)
        if d is None:
            continue
        assert r.min >= d.min, (op, name)
        if d.max is not None:
            assert r.max is not None and r.max <= d.max, (op, name, r.max, d.max)


def test_a_triton_patch_loads_against_the_op_folder_completed_with_sglang_s_files(tmp_path, monkeypatch):
    """On the H200 (2026-12-04) a decode_attention patch failed its first call in SGLang's forward: a wheel's op
    folder holds only the committed files, and the Triton kernel imports score_mod.py and srt utilities the way
    SGLang's module does. The kernel is loaded from the folder completed from the installed SGLang."""
    from astra_sglang.contract.patch import PatchManifest, PatchSource
    from astra_sglang.patches import kernels

    seen: list[Path] = []
    monkeypatch.setattr(kernels, "extracted_op_dir", lambda m: tmp_path / "completed")
    monkeypatch.setattr(kernels, "op_kernel", lambda op_dir, *a, **k: seen.append(op_dir))
    m = PatchManifest.model_construct(op="decode_attention", source=PatchSource(kind="triton", file="k.py"))
    kernels.load_kernel(tmp_path, m, None, dtypes=["bfloat16"], arch=None)
    assert seen == [tmp_path / "completed"]


def test_the_derived_guard_serves_a_decode_shape_only_where_the_patch_won_at_every_measured_context():
    """The guard cannot see S (the mean context is a device read). A patch that wins at context 1024 and loses at
    8192 for the same B/NK/G/D/MS/P must not serve that point at all; where it wins at both, it serves."""
    from astra_sglang.contract.patch import GuardRow
    from astra_sglang.patches.tooling.guard import derive_guard

    def row(b: int, s: int, wins: bool) -> GuardRow:
        return GuardRow(dims=dict(B=b, S=s, NK=8, G=4, D=128, P=1, R=1, X=1, MS=8), dtype="bfloat16",
                        speedup=1.3 if wins else 0.9, spread_pct=1.0, wins=wins)

    rows = [row(32, 1024, True), row(32, 8192, False), row(128, 1024, True), row(128, 8192, True)]
    guard, table = derive_guard(DecodeAttentionAdapter().default_guard(), rows)
    assert not guard.accepts_dims(dict(B=32, NK=8, G=4, D=128, MS=8, P=1))
    assert guard.accepts_dims(dict(B=128, NK=8, G=4, D=128, MS=8, P=1))
    assert [r.served for r in table] == [False, False, True, True]
