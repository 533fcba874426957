"""Row-strided inputs (TensorArg.row_stride): the harness lays an input out as SGLang passes it, a view of a
wider buffer's rows (LLaMA's q in the fused qkv projection), so a kernel that assumes a contiguous q is caught and
one that reads the stride needs no copy. The gaps between rows are guarded like the ends: there SGLang keeps k and v."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from astra_sglang.contract.eval_config import EvalConfig  # noqa: E402
from astra_sglang.contract.op import load_manifest  # noqa: E402
from astra_sglang.harness import evaluate  # noqa: E402
from astra_sglang.harness.shared.arena import Arena, put, take, views  # noqa: E402
from astra_sglang.harness.shared.tensors import ArgSet, Guarded  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXTRACTED = ROOT / "extracted" / "decode_attention"
CORRECT = ROOT / "tests" / "fixtures" / "i23_decode_attention" / "correct.py"


def test_a_row_strided_view_keeps_poison_between_its_rows_and_a_write_there_breaks_the_guards() -> None:
    g = Guarded.alloc((3, 2, 4), torch.float32, "cpu", row_stride=16)  # rows of 8 elements, 8 between them
    assert g.view.shape == (3, 2, 4) and g.view.stride() == (16, 4, 1) and not g.view.is_contiguous()
    g.view.fill_(1.0)
    assert g.guards_intact()
    rows = g.buf[g.start:g.start + g.numel].view(3, 16)
    rows[1, 8] = 0.0  # the first k element of row 1, in SGLang's qkv
    assert not g.guards_intact()
    with pytest.raises(ValueError, match="shorter than a row"):
        Guarded.alloc((3, 2, 4), torch.float32, "cpu", row_stride=7)


def _qkv_rows_contract(tmp_path: Path) -> Path:
    """decode_attention's op folder with q laid out as LLaMA passes it in every case (rows of the fused qkv
    output); the committed contract gets this as its dim QS."""
    folder = tmp_path / "decode_attention"
    shutil.copytree(EXTRACTED, folder)
    raw = json.loads((folder / "manifest.json").read_text())
    dims = [d["name"] for d in raw["signature"]["dims"]]
    (q,) = [t for t in raw["signature"]["tensors"] if t["name"] == "q"]
    q.setdefault("row_stride", "NK*G*D+QS*2*NK*D" if "QS" in dims else "NK*G*D+2*NK*D")
    (folder / "manifest.json").write_text(json.dumps(raw, indent=2))
    return folder


def test_the_arena_hands_the_worker_the_same_row_strided_view(tmp_path: Path) -> None:
    m = load_manifest(_qkv_rows_contract(tmp_path))
    dims = {"B": 2, "S": 7, "NK": 1, "G": 4, "D": 16, "P": 4, "R": 1, "X": 2, "KX": 0, "MS": 8}
    if any(d.name == "QS" for d in m.signature.dims):
        dims["QS"] = 1
    a = ArgSet(m, dims, "float16", "cpu", (None, None))
    q = a.tensors["q"].view
    assert q.stride() == ((4 + 2) * 16, 16, 1)  # (NQ + 2 NK) * D
    q.copy_(torch.arange(q.numel(), dtype=torch.float16).view(q.shape))
    arena = Arena(a.nbytes() + 16 * 4096)
    try:
        layout = put(arena, a)
        seen = views(arena.host, layout)["q"]
        assert seen.stride() == q.stride() and torch.equal(seen, q)
        back = take(arena, layout, a).tensors["q"]
        assert back.view.stride() == q.stride() and torch.equal(back.view, q) and back.guards_intact()
        del seen, back
    finally:
        arena.close()


def test_a_kernel_that_assumes_a_contiguous_q_fails_where_q_is_a_view_of_the_qkv_rows(tmp_path: Path) -> None:
    """SCRIPTED candidate: the correct test kernel with q's strides computed as if q were contiguous. Right on a
    contiguous q, wrong on LLaMA's (it reads k and v as q); the contract's QS = 1 cases catch it."""
    src = CORRECT.read_text()
    strides = "q.stride(0), q.stride(1),"
    assert strides in src
    cand = tmp_path / "contiguous_q.py"
    cand.write_text(src.replace(strides, "q.shape[1] * q.shape[2], q.shape[2],", 1))
    cfg = EvalConfig(shapes="test", dtypes=["float16"], device="cpu", timing=False, seed=3,
                     distributions=["normal"], check_all_shapes=True)
    folder = _qkv_rows_contract(tmp_path)
    r = evaluate(folder, cand, cfg)
    assert not r.ok and r.correctness is not None and r.correctness.first_failure is not None
    assert r.correctness.first_failure.dims.get("QS", 1) == 1, r.correctness.first_failure
    assert r.correctness.first_failure.reason in ("mismatch", "nan"), r.correctness.first_failure
    ok = evaluate(folder, CORRECT, cfg)
    assert ok.ok, ok.error
    assert evaluate(EXTRACTED, cand, cfg).ok == (not any(d.name == "QS" for d in load_manifest(EXTRACTED).signature.dims))


def test_a_row_strided_input_is_perturbed_on_the_kept_replay_as_the_judge_perturbs_its_copy(tmp_path: Path) -> None:
    """The memoisation defence moves a window of every perturbable input (floating, filled by the harness) before
    the kept replay. A row-strided one is perturbed too (else a kernel could fingerprint it alone), in the same
    row-major order as the judge's dense copy, never in the gaps between its rows, and put back after.
    decode_attention's q comes from its inputs.py (not perturbed, as every generated tensor); here it is filled by
    the harness, as a row-strided activation of another op would be."""
    from astra_sglang.harness.shared.replay_guard import ReplayGuard, perturb, perturbable

    m = load_manifest(_qkv_rows_contract(tmp_path))
    for t in m.signature.tensors:
        if t.name == "q":
            t.generated = False
    dims = {"B": 64, "S": 7, "NK": 1, "G": 4, "D": 16, "P": 4, "R": 1, "X": 2, "KX": 0, "MS": 8}
    if any(d.name == "QS" for d in m.signature.dims):
        dims["QS"] = 1
    a = ArgSet(m, dims, "float16", "cpu", (None, None))
    q = a.tensors["q"]
    assert not q.view.is_contiguous() and "q" in perturbable(a)
    q.view.copy_(torch.randn(q.view.shape, generator=torch.Generator().manual_seed(1)).half())
    before = q.view.clone()
    guard = ReplayGuard([a], ["o"])
    guard._move(seed=1234)
    want = perturb({"q": before}, ["q"], 1234, 0)["q"]
    assert not torch.equal(q.view, before) and torch.equal(q.view, want)
    assert q.guards_intact()
    guard._restore()
    assert torch.equal(q.view, before) and q.guards_intact()


def test_the_judges_arena_holds_a_row_strided_input_with_its_gaps(tmp_path: Path) -> None:
    """The arena was sized by the view's elements, not the rows it spans: decode attention's paper shapes with q in
    LLaMA's qkv rows failed on the H100 with "arena of 1128685568 bytes too small" (2026-12-06)."""
    from astra_sglang.harness.judge.process import arena_bytes
    from astra_sglang.harness.shared.protocol import CaseSpec, CheckJob

    folder = _qkv_rows_contract(tmp_path)
    m = load_manifest(folder)
    dims = {"B": 512, "S": 7, "NK": 8, "G": 4, "D": 128, "P": 4, "R": 1, "X": 2, "KX": 0, "MS": 8}
    if any(d.name == "QS" for d in m.signature.dims):
        dims["QS"] = 1
    need = ArgSet(m, dims, "bfloat16", "cpu", (None, None)).nbytes()
    job = CheckJob(op_dir=str(folder), manifest=m, candidate=None, device="cpu",
                   config=EvalConfig(shapes="test", dtypes=["bfloat16"], device="cpu"), warmup=1, rep=1,
                   timing_seed=0, cases=[CaseSpec(dims=dims, dtype="bfloat16", distribution="normal", seed=0)], timed_shapes=[],
                   timing_dtypes=["bfloat16"])
    arena = Arena(arena_bytes(job))
    try:
        put(arena, ArgSet(m, dims, "bfloat16", "cpu", (None, None)))
        assert arena.nbytes >= need
    finally:
        arena.close()
