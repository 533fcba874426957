"""The serving hot path's contracts (KV-cache store, RoPE): SGLang's original kernel agrees with each contract's
reference on CPU (Triton under TRITON_INTERPRET=1), a wrong reference is refused, the generated batches are
valid for every legal shape, and the JIT RoPE reference matches SGLang's own torch RoPE."""

from __future__ import annotations

import dataclasses
import itertools
import random
from pathlib import Path

import pytest

pytest.importorskip("sglang")
torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from astra_sglang.contract.op import load_manifest  # noqa: E402
from astra_sglang.extract import catalog  # noqa: E402
from astra_sglang.extract.catalog.source_text import FileText  # noqa: E402
from astra_sglang.extract.extractor import write_op  # noqa: E402
from astra_sglang.harness.parent.contract_validation import validate_contract, validation_config  # noqa: E402
from astra_sglang.loader.launch import load_inputs, load_reference  # noqa: E402


def _write(name: str, out: Path, reference: str | None = None) -> Path:
    """The op's folder under ``out``; with ``reference``, the same contract but that reference."""
    entry = catalog.find(name)
    assert entry is not None
    return write_op(dataclasses.replace(entry, reference=FileText.verbatim(reference)) if reference else entry, out).path


def _validate(op: Path, dtypes: list[str] | None = None):
    cfg = validation_config("cpu")
    if dtypes:
        cfg = cfg.model_copy(update={"dtypes": dtypes})
    return validate_contract(op, cfg)[0]


@pytest.mark.parametrize(("name", "dtypes"), [
    ("reshape_and_cache_flash", None),
    ("apply_interleaved_rope", None),
    # bfloat16 is left out on CPU only: Triton 3.8's interpreter negates bfloat16 by flipping integer bits
    # (-64.0 -> -0.0625), which the kernel's rotate (tl.where(m, x, -x)) hits; the H200 checks bfloat16.
    ("fused_qk_rope_reshape_and_cache", ["float16"]),
    # the same interpreter limit hits the attention kernels' bfloat16 products (q * k in bf16)
    ("decode_attention", ["float16"]),
    ("extend_attention", ["float16"]),
])
def test_original_agrees_with_the_contract(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
                                           dtypes: list[str] | None) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    v = _validate(_write(name, tmp_path), dtypes)
    assert v.passed, v.first_failure
    assert v.cases_run >= 12 and v.cases_skipped == 0  # 3 shapes x dtypes x 4 distributions


_CACHE_IGNORING_PADDING = '''
def reference(**args):
    """Wrong on purpose: treats slot -1 as a slot (Python indexing writes the last cache row)."""
    key_cache, value_cache = args["key_cache"].clone(), args["value_cache"].clone()
    pages, page_size, heads, dim = key_cache.shape
    slots = args["slot_mapping"].long()
    key_cache.view(-1, heads, dim)[slots] = args["key"]
    value_cache.view(-1, heads, dim)[slots] = args["value"]
    return {"key_cache": key_cache, "value_cache": value_cache}
'''

_GPTJ_NOT_NEOX = '''
import torch


def reference(**args):
    """Wrong on purpose: GPT-J (interleaved pairs) instead of NeoX halves for q; the rest as the kernel."""
    cos, sin = args["cos_sin"][args["pos"].long()].chunk(2, dim=-1)
    cos, sin = cos[:, None, :].double(), sin[:, None, :].double()
    q = args["q"].double()
    x, y = q[..., ::2], q[..., 1::2]
    q = torch.stack((x * cos - y * sin, x * sin + y * cos), dim=-1).flatten(-2)
    return {"q": q}
'''


@pytest.mark.parametrize(("name", "wrong", "dtypes"), [
    ("reshape_and_cache_flash", _CACHE_IGNORING_PADDING, None),
    ("fused_qk_rope_reshape_and_cache", _GPTJ_NOT_NEOX, ["float16"]),
])
def test_a_wrong_reference_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, wrong: str,
                                      dtypes: list[str] | None) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    v = _validate(_write(name, tmp_path, reference=wrong), dtypes)
    assert not v.passed
    assert v.first_failure and "reference mismatch" in v.first_failure


def _slot_batches(name: str, tmp_path: Path):
    op = _write(name, tmp_path)
    manifest = load_manifest(op)
    make, _ = load_inputs(op, manifest)
    assert make is not None
    dims = [d.name for d in manifest.signature.dims]
    rng = random.Random(7)
    fixed = {d.name: d.min for d in manifest.signature.dims if d.max is not None}
    for _ in range(40):  # held-out cases draw every dim from 1..9 within its constraints
        d = {n: fixed.get(n, max(rng.randint(1, 9), next(x.min for x in manifest.signature.dims if x.name == n)))
             for n in dims}
        yield d, make(dict(d), "float16", torch.Generator().manual_seed(rng.getrandbits(32)), "cpu")


@pytest.mark.parametrize("name", ["reshape_and_cache_flash", "fused_qk_rope_reshape_and_cache"])
def test_slot_mappings_are_valid_batches_for_every_legal_shape(tmp_path: Path, name: str) -> None:
    for d, made in _slot_batches(name, tmp_path):
        slots = made["slot_mapping"]
        assert slots.dtype == torch.int64 and slots.shape == (d["T"],)
        real = slots[slots >= 0]
        pool = (d["T"] // d["BS"] + d["X"]) * d["BS"]
        assert len(real) == d["T"] - d["T"] // 4, "only the trailing quarter is padding"
        assert bool((slots[len(real):] == -1).all())
        assert len(set(real.tolist())) == len(real), "slots of one batch are distinct"
        assert bool((real >= d["BS"]).all()) and bool((real < pool).all()), "inside the pool, outside page 0"
        if "pos" in made:
            rows = d["T"] + d["C"]
            assert made["cos_sin"].shape == (rows, d["D"]) and made["cos_sin"].dtype == torch.float32
            assert bool((made["pos"] >= 0).all()) and bool((made["pos"] < rows).all())


def test_fused_rope_reference_matches_sglangs_apply_rotary_emb(tmp_path: Path) -> None:
    """The CUDA JIT kernel cannot run here; its reference is held to SGLang's own torch RoPE
    (RotaryEmbedding.forward_native's apply_rotary_emb, NeoX) in float32 on a generated batch."""
    from sglang.srt.layers.rotary_embedding.utils import apply_rotary_emb

    op = _write("fused_rope", tmp_path)
    manifest = load_manifest(op)
    make, _ = load_inputs(op, manifest)
    reference = load_reference(op, manifest)
    assert make is not None
    for t, nq, nk, c in itertools.product((1, 7), (4, 8), (1, 4), (5, 300)):
        dims = {"T": t, "NQ": nq, "NK": nk, "D": 128, "C": c}
        made = make(dims, "float32", torch.Generator().manual_seed(t * 1000 + c), "cpu")
        q, k = torch.randn(t, nq, 128), torch.randn(t, nk, 128)
        ours = reference(q=q, k=k, **made)
        cos, sin = made["cos_sin_cache"].index_select(0, made["positions"]).chunk(2, dim=-1)
        torch.testing.assert_close(ours["q"].float(), apply_rotary_emb(q, cos, sin, True), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours["k"].float(), apply_rotary_emb(k, cos, sin, True), atol=1e-5, rtol=1e-5)
        # the table is SGLang's: cat(cos, sin) of p * base^(-2i/d)
        inv = 1.0 / (500000.0 ** (torch.arange(0, 128, 2, dtype=torch.float64) / 128))
        p = made["positions"].double()[:, None] * inv[None, :]
        torch.testing.assert_close(made["cos_sin_cache"][made["positions"]].double(),
                                   torch.cat((p.cos(), p.sin()), dim=-1), atol=1e-6, rtol=0)


@pytest.mark.nvcc
def test_fused_rope_original_builds_for_both_dtypes(tmp_path: Path) -> None:
    from astra_sglang.loader.cuda_build import build_cuda_module

    op = _write("fused_rope", tmp_path)
    manifest = load_manifest(op)
    built = build_cuda_module(op, manifest, "bfloat16", load=False)  # float16 differs only in a template argument
    assert built.report.ok
    assert any("fused_rope_kernel" in k.kernel for k in built.report.resources)
    assert all(k.spill_stores_bytes == 0 for k in built.report.resources)


@pytest.mark.gpu
def test_fused_rope_original_agrees_with_the_contract_on_gpu(tmp_path: Path) -> None:
    v = validate_contract(_write("fused_rope", tmp_path), validation_config("cuda"))[0]
    assert v.passed, v.first_failure


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["fused_qk_rope_reshape_and_cache", "decode_attention", "extend_attention"])
def test_original_agrees_in_bfloat16_on_gpu(tmp_path: Path, name: str) -> None:
    v = validate_contract(_write(name, tmp_path), validation_config("cuda"))[0]
    assert v.passed, v.first_failure
    assert "bfloat16" in v.dtypes


def _namespace(text: str) -> dict:
    ns: dict = {}
    exec(compile(text, "<contract>", "exec"), ns)  # noqa: S102 - our own catalog text, as inputs.py would hold it
    return ns


def test_decode_attention_contract_matches_torch_sdpa_on_a_mixed_batch() -> None:
    """decode_attention's contract is also held to torch's scaled_dot_product_attention (GQA expanded) on the
    batches its inputs.py generates: uniform and mixed lengths, single slots and pages."""
    entry = catalog.find("decode_attention")
    assert entry is not None and entry.inputs is not None
    make = _namespace(entry.inputs.text())
    reference = _namespace(entry.reference.text())["reference"]
    for b, s, nk, g, d, p, r in ((1, 1, 1, 1, 16, 1, 1), (3, 9, 2, 1, 32, 1, 2), (5, 40, 2, 4, 64, 16, 2),
                                 (4, 13, 1, 8, 16, 4, 1)):
        dims = {"B": b, "S": s, "NK": nk, "G": g, "D": d, "P": p, "R": r, "X": 3, "MS": 8}
        made = make["make_inputs"](dims, "float32", torch.Generator().manual_seed(b * 100 + s), "cpu")
        scal = make["scalars"](dims, "float32")
        indptr, indices = made["kv_indptr"].long(), made["kv_indices"]
        lens = indptr[1:] - indptr[:-1]
        assert int(indptr[-1]) == b * s and bool((lens >= 1).all())
        assert len(set(indices.tolist())) == b * s and bool((indices >= p).all())  # page 0 is padding
        assert bool((made["num_kv_splits"] >= 1).all()) and bool((made["num_kv_splits"] <= 8).all())
        v = torch.randn(made["k_buffer"].shape[0], nk, d)
        workspace = {"attn_logits": torch.empty(b, nk * g, 8, d), "attn_lse": torch.empty(b, nk * g, 8)}
        ours = reference(v_buffer=v, **made, **scal, **workspace)["o"]
        for i in range(b):
            rows = indices[indptr[i]:indptr[i + 1]]
            k_i = made["k_buffer"][rows].repeat_interleave(g, 1).transpose(0, 1)  # [NQ, L, D]
            v_i = v[rows].repeat_interleave(g, 1).transpose(0, 1)
            want = torch.nn.functional.scaled_dot_product_attention(made["q"][i][:, None, :], k_i, v_i,
                                                                    scale=scal["sm_scale"])[:, 0, :]
            torch.testing.assert_close(ours[i].float(), want, atol=1e-5, rtol=1e-5)
        if r == 2 and b > 1:
            assert lens.unique().numel() > 1, "the generated batch mixes KV lengths"


def test_extend_attention_contract_matches_torch_sdpa_on_a_mixed_batch() -> None:
    """extend_attention's contract against torch SDPA with an explicit mask: every cached prefix row visible,
    the request's own new tokens causally; max_len_extend from scalars() is the batch's real maximum."""
    entry = catalog.find("extend_attention")
    assert entry is not None and entry.inputs is not None
    make = _namespace(entry.inputs.text())
    reference = _namespace(entry.reference.text())["reference"]
    for b, l_, r, nk, g, d in ((1, 1, 1, 1, 1, 16), (3, 5, 4, 2, 1, 32), (4, 6, 7, 2, 4, 64)):
        dims = {"B": b, "L": l_, "R": r, "NK": nk, "G": g, "D": d, "X": 2}
        made = make["make_inputs"](dims, "float32", torch.Generator().manual_seed(b * 10 + l_), "cpu")
        scal = make["scalars"](dims, "float32")
        qo, kv, indices = made["qo_indptr"].long(), made["kv_indptr"].long(), made["kv_indices"]
        ext, pre = qo[1:] - qo[:-1], kv[1:] - kv[:-1]
        assert int(qo[-1]) == b * l_ and int(kv[-1]) == b * r and bool((ext >= 1).all()) and bool((pre >= 0).all())
        assert int(ext.max()) == scal["max_len_extend"]
        assert len(set(indices.tolist())) == b * r and bool((indices >= 1).all())
        v_ext, v_buf = torch.randn(b * l_, nk, d), torch.randn(b * r + 2, nk, d)
        ours = reference(v_extend=v_ext, v_buffer=v_buf, **made, **scal)["o_extend"]
        for i in range(b):
            rows, lo, hi = indices[kv[i]:kv[i + 1]], int(qo[i]), int(qo[i + 1])
            k = torch.cat((made["k_buffer"][rows], made["k_extend"][lo:hi])).repeat_interleave(g, 1).transpose(0, 1)
            v = torch.cat((v_buf[rows], v_ext[lo:hi])).repeat_interleave(g, 1).transpose(0, 1)
            n, e = rows.numel(), hi - lo
            mask = torch.cat((torch.ones(e, n, dtype=torch.bool), torch.ones(e, e, dtype=torch.bool).tril()), 1)
            want = torch.nn.functional.scaled_dot_product_attention(made["q_extend"][lo:hi].transpose(0, 1), k, v,
                                                                    attn_mask=mask, scale=scal["sm_scale"])
            torch.testing.assert_close(ours[lo:hi].float(), want.transpose(0, 1), atol=1e-5, rtol=1e-5)
    assert ext.unique().numel() > 1, "the generated batch mixes extend lengths"


def test_a_mixed_length_shape_costs_the_same_in_every_input_set() -> None:
    """A mixed-length (R=2) shape's KV lengths are one multiset per (B, S), only their order drawn: with drawn cuts
    the longest request (which sets the kernel's time) was a draw too, and one kernel timed twice at B8 S32768 took
    963 and 1197 us on the H100 (2026-12-05)."""
    entry = catalog.find("decode_attention")
    assert entry is not None and entry.inputs is not None
    make = _namespace(entry.inputs.text())
    for b, s in ((8, 32768), (256, 1024), (5, 3), (64, 4096)):
        drawn = [make["kv_lengths"](b, b * s, torch.Generator().manual_seed(seed), "cpu") for seed in (0, 1, 2)]
        assert all(int(d.sum()) == b * s and bool((d >= 1).all()) for d in drawn)
        assert all(d.sort().values.tolist() == drawn[0].sort().values.tolist() for d in drawn)
        assert any(d.tolist() != drawn[0].tolist() for d in drawn), "the order is fresh"
        assert drawn[0].unique().numel() > 1, "still mixed"
    made = make["make_inputs"]({"B": 8, "S": 32768, "NK": 1, "G": 1, "D": 16, "P": 1, "R": 2, "X": 1},
                               "float32", torch.Generator().manual_seed(3), "cpu")
    indptr = made["kv_indptr"].long()
    assert int((indptr[1:] - indptr[:-1]).max()) == round(32768 * sum(1 / j for j in range(1, 9)))
