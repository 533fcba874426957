"""A patch's guard comes from per-shape measurements: it serves exactly where it beat what SGLang serves.

The first fused_add_rmsnorm guard (T 128..512, typed from the four paper shapes) served none of the decode rows
where the patch measured 1.4-1.7x faster and took in T=512 at H=4096, where it measured 0.96x. The rows below are
SYNTHETIC (written here, shaped like that H200 measurement), not measurements.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from astra_sglang.contract.patch import GuardRow, box_takes, load_patch_manifest, write_patch_manifest
from astra_sglang.patches.adapters import get_adapter, make_guard
from astra_sglang.patches.adapters.base import Prepared
from astra_sglang.patches.tooling.add import covered_check_shapes
from astra_sglang.patches.tooling.guard import derive_guard

REPO = Path(__file__).resolve().parents[1]

# (T, H) -> speedup over what SGLang serves; spread 1% everywhere (synthetic, shaped like the H200 sweep)
SYNTHETIC = {
    **{(t, h): s for h in (4096, 8192, 14336) for t, s in ((1, 1.42), (8, 1.63), (32, 1.6), (64, 1.62), (128, 1.55),
                                                              (256, 1.33))},
    (512, 4096): 0.96, (512, 8192): 1.005, (512, 14336): 1.03, (1024, 4096): 0.99, (1024, 14336): 1.0,
    (8192, 8192): 1.0, (17, 4100): 0.62,  # H=4100 is outside the adapter's 8-element alignment
}


def _rows(table: dict[tuple[int, int], float], dtype: str = "bfloat16") -> list[GuardRow]:
    return [GuardRow(dims={"T": t, "H": h}, dtype=dtype, served_by="flashinfer_fused_add_rmsnorm", speedup=s,
                     spread_pct=1.0, wins=(s - 1.0) * 100.0 > 1.0) for (t, h), s in table.items()]


def _accepts(guard, t: int, h: int, dtype: str = "bfloat16") -> bool:
    import torch

    x = torch.empty(t, h, dtype=getattr(torch, dtype))
    return make_guard(guard, "cpu")(Prepared({}, (x,), {"T": t, "H": h}))


def test_guard_serves_every_measured_win_and_no_measured_loss() -> None:
    base = get_adapter("fused_add_rmsnorm").default_guard()
    guard, marked = derive_guard(base, _rows(SYNTHETIC))
    for r in marked:
        assert r.served == (r.wins and r.dims["H"] % 8 == 0), r
        assert _accepts(guard, r.dims["T"], r.dims["H"]) == r.served, r
    # between two measured winning points that agree, it serves; beyond the measured ends, it does not
    assert _accepts(guard, 100, 4096) and _accepts(guard, 16, 5120) and _accepts(guard, 512, 14336)
    assert not _accepts(guard, 300, 4096) and not _accepts(guard, 257, 8192) and not _accepts(guard, 1, 16384)
    assert not _accepts(guard, 2048, 14336)
    assert guard.dtypes == ["bfloat16"] and not _accepts(guard, 1, 4096, "float16")  # fp16 was not measured
    shapes = covered_check_shapes(get_adapter("fused_add_rmsnorm").default_check_shapes(), guard)
    assert shapes and all(guard.accepts_dims(s) for s in shapes)
    assert {guard.regions.index(b) for s in shapes for b in guard.regions
            if all(r.accepts(s[n]) for n, r in b.items())} == set(range(len(guard.regions)))  # every region checked


def test_one_losing_dtype_keeps_the_shape_out() -> None:
    base = get_adapter("fused_add_rmsnorm").default_guard()
    rows = _rows({(1, 4096): 1.4, (8, 4096): 1.5}) + _rows({(1, 4096): 1.3, (8, 4096): 0.9}, "float16")
    guard, _ = derive_guard(base, rows)
    assert _accepts(guard, 1, 4096) and _accepts(guard, 1, 4096, "float16")
    assert not _accepts(guard, 8, 4096) and not _accepts(guard, 8, 4096, "float16")


def test_measured_on_two_gpus_each_serves_only_where_it_won_there() -> None:
    """One set of boxes for all GPUs served on the H200 a shape measured on the H100 only (decode attention's
    Qwen3 B 128 after the contract revision, 2026-12-07), and dropped on both GPUs a shape one of them lost
    (LLaMA B 32: 1.044x on the H200, 0.96x on the H100). Per GPU: each serves its own wins, the union is where it
    may serve somewhere, and a GPU that won nothing serves nothing. SYNTHETIC rows."""
    base = get_adapter("fused_add_rmsnorm").default_guard()
    h100, h200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"

    def on(gpu: str, table: dict[tuple[int, int], float]) -> list[GuardRow]:
        return [r.model_copy(update={"gpu": gpu}) for r in _rows(table)]

    rows = on(h100, {(1, 4096): 1.4, (32, 4096): 0.96, (128, 4096): 1.3}) + on(h200, {(1, 4096): 1.5,
                                                                                    (32, 4096): 1.044})
    guard, marked = derive_guard(base, rows)
    g100, g200 = guard.on_gpu(h100), guard.on_gpu(h200)
    assert g100 is not None and g200 is not None
    assert [t for t in (1, 32, 128) if g100.accepts_dims({"T": t, "H": 4096})] == [1, 128]
    assert [t for t in (1, 32, 128) if g200.accepts_dims({"T": t, "H": 4096})] == [1, 32]  # 128: H100 only
    assert all(guard.accepts_dims({"T": t, "H": 4096}) for t in (1, 32, 128))  # the union: checked at first call
    assert [(r.gpu, r.dims["T"]) for r in marked if r.served] == [(h100, 1), (h100, 128), (h200, 1), (h200, 32)]
    assert guard.on_gpu("NVIDIA B200") == guard.model_copy(update={"gpu_regions": {}})  # the GPU gate's business
    lost, _ = derive_guard(base, rows + on("NVIDIA H20", {(1, 4096): 0.9}))
    assert lost.on_gpu("nvidia  h20") is None  # won nothing there: serves nothing there
    one, _ = derive_guard(base, on(h100, {(1, 4096): 1.4, (32, 4096): 0.96}))
    assert one.gpu_regions == {} and "gpu_regions" not in one.model_dump()  # one GPU: the guard as before


def test_no_win_anywhere_is_refused() -> None:
    from astra_sglang.errors import AstraError

    with pytest.raises(AstraError, match="nothing to serve"):
        derive_guard(get_adapter("fused_add_rmsnorm").default_guard(), _rows({(1, 4096): 1.005, (8, 4096): 0.9}))


def test_patches_guard_rederives_a_shipped_patch_from_its_evidence(tmp_path: Path) -> None:
    """`patches guard ID --evidence R.json --write` on a copy of the registry: the guard comes from the evidence's
    timed shapes (here the shipped patch's own paper-shape results), its check shapes lie inside it, and the
    patch still installs (its files and its op pin are untouched)."""
    shutil.copytree(REPO / "patches", tmp_path / "patches")
    folder = tmp_path / "patches" / "fused_add_rmsnorm" / "fused-add-rmsnorm-mr-k4"
    shipped = load_patch_manifest(folder)
    paper = [r for r in shipped.evidence.results if r.timing and len(r.timing.shapes) == 4]  # the run's four shapes
    before = shipped.model_copy(update={"evidence": shipped.evidence.model_copy(update={"results": [],
                                                                                       "guard_table": []})})
    write_patch_manifest(folder, before)  # as the run registered it, before any per-shape measurement
    evidence = tmp_path / "paper.json"
    evidence.write_text(json.dumps([r.model_dump(mode="json") for r in paper[:1]]))
    env = {**__import__("os").environ, "ASTRA_SGLANG_PATCHES_DIR": str(tmp_path / "patches")}
    proc = subprocess.run([sys.executable, "-m", "astra_sglang", "patches", "guard", "fused-add-rmsnorm-mr-k4",
                           "--evidence", str(evidence), "--write"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    after = load_patch_manifest(folder)
    served = {(r.dims["T"], r.dims["H"]) for r in after.evidence.guard_table if r.served}
    assert served == {(256, 4096), (128, 11008), (512, 14336)}  # 1024x4096 measured 0.991x: not served
    assert not after.guard.accepts_dims({"T": 1024, "H": 4096}) and after.guard.accepts_dims({"T": 512, "H": 14336})
    assert after.check_shapes and all(after.guard.accepts_dims(s) for s in after.check_shapes)
    assert after.files == before.files and after.op_manifest_sha256 == before.op_manifest_sha256
    assert "SERVED" in proc.stdout and "no win; flashinfer_fused_add_rmsnorm serves" in proc.stdout  # what SGLang serves


def _contract(dtypes: list[str], h_max: int | None, h_mult: int):
    from astra_sglang.contract.op import load_manifest

    m = load_manifest(REPO / "extracted" / "fused_add_rmsnorm")
    dims = [d.model_copy(update={"max": h_max, "multiple_of": h_mult}) if d.name == "H" else d
            for d in m.signature.dims]
    return m.model_copy(update={"signature": m.signature.model_copy(update={"dtypes": dtypes, "dims": dims})})


def test_a_guard_never_serves_a_call_its_contract_cannot_check():
    """The adapter's ranges are typed by hand; the contract's are what the harness draws cases from. A contract
    that checks H only up to 8192, in multiples of 16, and only bf16 cuts the adapter's guard to that."""
    from astra_sglang.patches.tooling.guard import within_contract

    base = get_adapter("fused_add_rmsnorm").default_guard()
    cut = within_contract(base, _contract(["bfloat16"], 8192, 16))
    assert cut.dtypes == ["bfloat16"]
    assert cut.dims["H"].max == 8192 and cut.dims["H"].multiple_of == 16
    assert _accepts(cut, 4, 8192) and not _accepts(cut, 4, 8200) and not _accepts(cut, 4, 4104)
    assert not _accepts(cut, 4, 4096, "float16")


def test_a_guard_outside_its_contract_is_one_clear_error():
    from astra_sglang.errors import AstraError
    from astra_sglang.patches.tooling.guard import within_contract

    base = get_adapter("fused_add_rmsnorm").default_guard()
    with pytest.raises(AstraError, match="contract checks only"):
        within_contract(base.model_copy(update={"dtypes": ["float32"]}), _contract(["bfloat16"], None, 8))
    low = base.model_copy(update={"dims": {**base.dims, "H": base.dims["H"].model_copy(update={"min": 9000})}})
    with pytest.raises(AstraError, match="nothing of it lies inside"):
        within_contract(low, _contract(["bfloat16"], 8192, 8))


def test_verify_records_a_patch_slower_only_where_its_guard_sends_calls_to_sglang():
    """`patches verify --record` refused decode attention's patch for B32 S1033 (0.96x on the H100, 2026-12-06),
    a shape its derived guard gives to SGLang's original. A slower shape inside the guard still refuses.
    The timings below are SYNTHETIC."""
    from astra_sglang.contract.patch import DimRange, GuardSpec, PatchManifest
    from astra_sglang.contract.result import BuildReport, EvalResult, ShapeTiming, TimingReport
    from astra_sglang.patches.tooling.verify import slower_shapes

    guard = GuardSpec(dtypes=["bfloat16"], dims={"B": DimRange(min=1, max=256)},
                      regions=[{"B": DimRange(min=1, max=16)}, {"B": DimRange(min=128, max=256)}])
    m = PatchManifest.model_construct(guard=guard)

    def timed(b: int, speedup: float, dtype: str = "bfloat16") -> ShapeTiming:
        return ShapeTiming(dims={"B": b, "S": 1033}, dtype=dtype, original_us=60.0, candidate_us=60.0 / speedup,
                           speedup=speedup, spread_pct=1.0, verdict="slower" if speedup < 1 else "faster",
                           bytes_moved=1, original_gbps=1.0, original_pct_ceiling=1.0)

    def result(*shapes: ShapeTiming) -> EvalResult:
        timing = TimingReport(method="synthetic", copy_ceiling_gbps=3000.0, shapes=list(shapes))
        return EvalResult(op_id="attention.decode_attention_fwd", device="synthetic", sglang_version="0.5.23",
                          build=BuildReport(ok=True), timing=timing)

    served, outside = slower_shapes(m, result(timed(1, 2.0), timed(32, 0.96), timed(128, 1.2), timed(8, 0.9, "float16")))
    assert served == [] and [s.dims["B"] for s in outside] == [32, 8]
    served, _ = slower_shapes(m, result(timed(128, 0.97)))
    assert [s.dims["B"] for s in served] == [128]
    assert slower_shapes(m, result().model_copy(update={"timing": None})) is None


def test_the_guard_in_front_of_a_retune_leaves_it_the_shapes_where_it_beat_the_rewrite(tmp_path: Path) -> None:
    """`patches guard mr-da2-single-r1 --behind sglang-retuned-da --write` on a copy of the registry, from both
    patches' own H100 records (2026-12-06, real measurements): at B 128 (NK 8, G 4, page 1) the retune was 1.316x
    over SGLang and the rewrite 1.228x, and e2e decode B/A was 0.869 with the retune serving against 0.896 with the
    rewrite; there the retune serves. At B 1 the rewrite (2.05x / 4.24x against the retune's 1.83x / 3.45x) stays
    in front. The rewrite's own guard, for standing alone, is untouched; a retune is refused in front."""
    shutil.copytree(REPO / "patches", tmp_path / "patches")
    folder = tmp_path / "patches" / "decode_attention" / "mr-da2-single-r1"
    shipped = load_patch_manifest(folder)
    write_patch_manifest(folder, shipped.model_copy(update={"guard_in_front": {}}))
    env = {**__import__("os").environ, "ASTRA_SGLANG_PATCHES_DIR": str(tmp_path / "patches")}
    cmd = [sys.executable, "-m", "astra_sglang", "patches", "guard"]
    proc = subprocess.run([*cmd, "mr-da2-single-r1", "--behind", "sglang-retuned-da", "--write"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    after = load_patch_manifest(folder)
    front = after.guard_in_front["sglang-retuned-da"].on_gpu("NVIDIA H100 80GB HBM3")
    b = {"NK": 8, "G": 4, "D": 128, "MS": 8, "P": 1}
    assert front is not None and front.accepts_dims({"B": 1, **b}) and not front.accepts_dims({"B": 128, **b})
    # the rewrite's H200 record never timed S 512 (its twins): in front or alone, it serves nothing on an H200
    assert after.guard_in_front["sglang-retuned-da"].on_gpu("NVIDIA H200") is None
    assert after.guard.on_gpu("NVIDIA H200") is None
    assert after.guard == shipped.guard and after.guard.accepts_dims({"B": 128, **b})
    assert after.files == shipped.files and after.op_manifest_sha256 == shipped.op_manifest_sha256
    assert "sglang-retuned-da serves" in proc.stdout
    shown = subprocess.run([sys.executable, "-m", "astra_sglang", "patches", "show", "mr-da2-single-r1"], env=env,
                           capture_output=True, text=True, timeout=300)
    assert "serves in front of sglang-retuned-da (stacked; the rest goes to it): bfloat16: " in shown.stdout
    assert "on NVIDIA H100 80GB HBM3: (B 1, NK 8" in shown.stdout
    refused = subprocess.run([*cmd, "sglang-retuned-da", "--behind", "mr-da2-single-r1"], env=env,
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr


@pytest.mark.parametrize("gpu", ["NVIDIA H200", "NVIDIA H100 80GB HBM3"])
def test_a_slower_record_is_kept_and_the_guard_serves_only_where_it_won_on_that_gpu(tmp_path: Path, capsys,
                                                                                   monkeypatch, gpu: str) -> None:
    """`patches verify sglang-retuned-da --record`, the H100-measured retune slower at LLaMA's B 128. On an H200
    (a GPU new to it) the record was refused before ("slower inside its guard": the H100's), so the H200 never got
    a guard of its own; on the H100 the refusal left the patch pinned to its older records. Now the record is kept
    and the guard derived again per GPU: the recorded GPU serves only where it won in every record there, the other
    keeps its boxes. The times are SYNTHETIC (the shipped H100 record with its speedups rewritten)."""
    from types import SimpleNamespace

    from astra_sglang import platform_info
    from astra_sglang.cli.patches_cmd import _record
    from astra_sglang.patches.registry import find
    from astra_sglang.patches.tooling.verify import slower_shapes

    shutil.copytree(REPO / "patches", tmp_path / "patches")
    e = find("sglang-retuned-da", tmp_path / "patches")
    assert e.manifest is not None
    shipped = e.manifest
    h100_guard = shipped.guard
    rec = shipped.evidence.results[-1]  # the S 512 twins; the named set's record before it: a record times both
    named = next(r for r in reversed(shipped.evidence.results)
                 if r.timing is not None and any(s.dims["S"] > 512 for s in r.timing.shapes))
    assert rec.timing is not None and named.timing is not None
    b = {"NK": 8, "G": 4, "D": 128, "MS": 8, "P": 1}
    assert h100_guard.accepts_dims({"B": 128, **b}) and h100_guard.accepts_dims({"B": 1, **b})

    def slower_at_128(s):
        sp = 1.5 if s.dims["B"] == 1 else 0.9
        return s.model_copy(update={"speedup": sp, "candidate_us": s.original_us / sp,
                                    "verdict": "faster" if sp > 1 else "slower"})

    h = rec.model_copy(update={"device": f"{gpu} (sm_90)", "timing": rec.timing.model_copy(update={
        "shapes": [slower_at_128(s) for s in named.timing.shapes + rec.timing.shapes]})})
    split = slower_shapes(shipped, h)
    assert split is not None and split[0]  # slower inside the guard it has: the old rule refused the record
    monkeypatch.setattr(platform_info, "current", lambda: platform_info.Platform("sm_90", gpu))
    _record(e, SimpleNamespace(arch="sm_90", op_manifest_sha256=shipped.op_manifest_sha256), h, split[0])
    after = load_patch_manifest(e.path)
    assert gpu in after.validated_on.gpus and after.evidence.results[-1].device == h.device
    here = after.guard.on_gpu(gpu)
    assert here is not None and here.accepts_dims({"B": 1, **b}) and not here.accepts_dims({"B": 128, **b})
    if gpu == "NVIDIA H200":  # the H100 keeps what it won there
        g100 = after.guard.on_gpu("NVIDIA H100 80GB HBM3")
        assert g100 is not None and g100.regions == h100_guard.regions
    assert after.check_shapes and all(after.guard.accepts_dims(c) for c in after.check_shapes)
    said = capsys.readouterr().out
    assert "guard derived again from every record, per GPU" in said and "--behind sglang-retuned-da" in said


def test_a_guard_blind_to_the_kv_length_is_derived_across_it() -> None:
    """Decode attention's guard cannot see the KV length S (it lives on the GPU), so a point (B, heads, page) the
    records won at S >= 1033 served every S. 2026-12-07, H100, the device check: mr-da2-single-r1 0.962x at B 128
    S 512 NK 4 G 8, inside its guard. `patches verify --record` now times each guard point of the paper set once
    more at S 512 (the contract's shortest decode context), in the same served form (the graph's kv_indices buffer
    kept: KX grows by what the rows give back), and a loss there keeps the point out on that GPU only; ops whose
    guard sees every size, or whose shapes carry each GPU's served configs (fused MoE), time their set alone."""
    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.contract.op import load_manifest
    from astra_sglang.harness.shared.suite import timed_shapes
    from astra_sglang.patches.kernels import extracted_op_dir
    from astra_sglang.patches.tooling.add import default_guard
    from astra_sglang.patches.tooling.guard import measured_rows
    from astra_sglang.patches.tooling.verify import across_unseen_dims

    m = load_patch_manifest(REPO / "patches" / "decode_attention" / "mr-da2-single-r1")
    op = load_manifest(extracted_op_dir(m))
    paper = timed_shapes(op, EvalConfig(shapes="paper"))
    twins = across_unseen_dims(m, op, "paper")
    points = {tuple(d[k] for k in m.guard.dims) for d in paper}
    assert {d["S"] for d in twins} == {512} and len(twins) == len(points)  # every guard point of the set, once
    qwen3 = next(d for d in paper if d["B"] == 128 and d["NK"] == 4 and d["S"] == 1033)
    short = next(d for d in twins if d["B"] == 128 and d["NK"] == 4)
    assert short == {**qwen3, "S": 512, "KX": qwen3["KX"] + 128 * (1033 - 512)}  # same buffer, same q layout
    timed = timed_shapes(op, EvalConfig(shapes="paper", extra_timed_shapes=twins + twins[:1]))
    assert timed == paper + twins  # once each, after the named set
    assert timed_shapes(op, EvalConfig(shapes="paper", extra_timed_shapes=twins, only_extra_timed=True)) == twins
    assert across_unseen_dims(m, op, "test") == []
    for other in ("fused_add_rmsnorm/fused-add-rmsnorm-mr-k4", "fused_moe_kernel/sglang-retuned-moe-w1"):
        o = load_patch_manifest(REPO / "patches" / other)
        assert across_unseen_dims(o, load_manifest(extracted_op_dir(o)), "paper") == [], other

    h100, h200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
    from astra_sglang.patches.tooling.add import unseen_sizes

    # the shipped records: the H100's twins (2026-12-07) lost at B 128 NK 4 G 8 S 512 (0.963x) where S 1033 won
    guard, table = derive_guard(default_guard(m.op), measured_rows(m.evidence.results), unseen_sizes(m.op))
    assert not guard.takes(qwen3, "bfloat16", h100) and not guard.takes(short, "bfloat16", h100)
    llama = next(d for d in paper if d["B"] == 128 and d["NK"] == 8 and d["S"] == 1033)
    assert guard.takes(llama, "bfloat16", h100)  # won at both ends: still serves
    assert guard.on_gpu(h200) is None  # its H200 record predates the twins
    assert not next(r for r in table if r.dims == qwen3 and r.gpu == h100).served
    assert guard == m.guard  # what ships is what its records derive


def test_the_device_check_looks_inside_every_box_the_patch_serves_on_that_gpu() -> None:
    """Check shapes are picked per union box; on a GPU with its own boxes one can fall outside them (the hook then
    hands it to SGLang's kernel, and the check tests nothing of the patch there), and a box of that GPU can have no
    check shape at all: the shipped rewrite's H100 box B 128..256 / NK 8 / G 4, and its H200 box B 128 / NK 2 / G 8.
    The device check adds a shape inside each such box, so its not-slower verdict looks where the patch serves, and
    times each in the served form too."""
    from astra_sglang.patches.tooling.devcheck import shapes_here

    m = load_patch_manifest(REPO / "patches" / "decode_attention" / "mr-da2-single-r1")
    assert m.guard.on_gpu("NVIDIA H200") is None  # no S 512 twins timed there: nothing serves, nothing to check
    for gpu in ("NVIDIA H100 80GB HBM3",):
        here = m.guard.on_gpu(gpu)
        assert here is not None
        shapes = shapes_here(m, gpu)
        assert shapes[:len(m.check_shapes)] == m.check_shapes
        for box in here.regions:  # every box of this GPU holds a checked shape
            assert any(box_takes(box, d) for d in shapes), (gpu, box)
        # and each also in the form a graph-captured LLaMA server calls it (q in the qkv rows, graph kv_indices)
        eager = [d for d in shapes if not d.get("QS")]
        assert len(shapes) == 2 * len(eager)
        assert all({**d, "QS": 1, "KX": d["B"] * d["S"]} in shapes for d in eager)
    lone = load_patch_manifest(REPO / "patches" / "fused_add_rmsnorm" / "fused-add-rmsnorm-mr-k4")
    assert shapes_here(lone, "NVIDIA H100 80GB HBM3") == lone.check_shapes  # one GPU's guard, one form: as shipped


def test_verify_twins_only_is_refused_in_one_line_where_the_guard_sees_every_size(capsys) -> None:
    """`patches verify ID --twins-only` times only the short-context twins (half a decode-attention record); for a
    patch whose guard sees every size of its op there are none, and the harness says so instead of timing nothing."""
    from astra_sglang.patches.registry import find
    from astra_sglang.patches.tooling.verify import _harness

    result, note = _harness(find("fused-add-rmsnorm-mr-k4"), "paper", twins_only=True)
    assert result is None and note is not None and "--twins-only" in note and "sees every size" in note


def test_a_gpu_that_never_timed_the_short_kv_end_serves_nothing_there() -> None:
    """The guard cannot see decode attention's KV length S, so a point serves on a GPU only where that GPU timed it
    at the shortest S its rows name as well. The shipped rewrite's H200 record (S >= 1024 only, before the S 512
    twins existed) kept it serving every H200 box while the H100's twins showed losses at S 512 (2026-12-07:
    0.963x at B 128 NK 4 G 8). SYNTHETIC rows."""
    from astra_sglang.patches.tooling.add import default_guard, unseen_sizes

    h100, h200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
    base = default_guard("decode_attention")
    point = {"NK": 8, "G": 4, "D": 128, "MS": 8, "P": 1, "R": 1, "X": 1, "QS": 1}

    def row(gpu: str, b: int, s: int, speedup: float) -> GuardRow:
        return GuardRow(dims={"B": b, "S": s, **point, "KX": 0}, dtype="bfloat16", speedup=speedup, spread_pct=1.0,
                        wins=speedup > 1.01, gpu=gpu)

    rows = [row(h100, 1, 1033, 2.0), row(h100, 1, 512, 1.38), row(h100, 128, 1033, 1.2), row(h100, 128, 512, 0.96),
            row(h200, 1, 1024, 2.1), row(h200, 128, 1024, 1.27)]
    assert unseen_sizes("decode_attention") == ("S",) and unseen_sizes("fused_add_rmsnorm") == ()
    guard, table = derive_guard(base, rows, unseen_sizes("decode_attention"))
    call = {"B": 1, **point}
    assert guard.takes(call, "bfloat16", h100) and not guard.takes({**call, "B": 128}, "bfloat16", h100)
    assert guard.on_gpu(h200) is None  # won at S 1024, never timed at S 512 there
    assert [(r.gpu, r.dims["B"], r.dims["S"]) for r in table if r.served] == [(h100, 1, 1033), (h100, 1, 512)]
    blind, _ = derive_guard(base, rows)  # without the rule: the H200 serves both points
    assert blind.takes({**call, "B": 128}, "bfloat16", h200)
    # the other end: twins alone (`verify --twins-only` on a GPU without a record of the named set) serve nothing
    twins_only, _ = derive_guard(base, rows + [row("NVIDIA H20", 1, 512, 1.5)], unseen_sizes("decode_attention"))
    assert twins_only.on_gpu("NVIDIA H20") is None and twins_only.takes(call, "bfloat16", h100)


def test_the_listed_speedup_is_a_record_of_the_named_set_not_its_short_context_twins(tmp_path: Path, monkeypatch) -> None:
    """After `rerecord.sh ID:twins` (2026-12-07, H100) `patches list` showed the rewrite at 1.140x and the retune at
    1.194x: the geomean of the 13 S 512 twins alone, the last record, where the paper set's record said 1.469x. A
    timing report now says what it timed, and the headline skips a twins-only record."""
    from astra_sglang.cli.patches_cmd import _rows
    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.harness.parent.evaluate import _timing_report

    shutil.copytree(REPO / "patches", tmp_path / "patches")
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES_DIR", str(tmp_path / "patches"))
    rows = {r["patch_id"]: r["geomean_speedup"] for r in _rows()}
    m = load_patch_manifest(REPO / "patches" / "decode_attention" / "mr-da2-single-r1")
    last = m.evidence.results[-1]
    assert last.timing is not None and last.timing.extra_only and last.geomean_speedup is not None
    assert rows["mr-da2-single-r1"] == m.evidence.results[-2].geomean_speedup != last.geomean_speedup
    twins = [{"B": 1, "S": 512}, {"B": 8, "S": 512}]
    only = _timing_report([], 3000.0, EvalConfig(shapes="paper", extra_timed_shapes=twins, only_extra_timed=True), True)
    both = _timing_report([], 3000.0, EvalConfig(shapes="paper", extra_timed_shapes=twins), True)
    plain = _timing_report([], 3000.0, EvalConfig(shapes="paper"), True)
    assert (only.shape_set, both.shape_set, plain.shape_set) == ("2 extra only", "paper + 2 extra", None)
    assert only.extra_only and not both.extra_only and "shape_set" not in plain.model_dump()
    shown = subprocess.run([sys.executable, "-m", "astra_sglang", "patches", "show", "mr-da2-single-r1"],
                           env={**__import__("os").environ, "COLUMNS": "250"}, capture_output=True, text=True,
                           timeout=300)
    assert f"geomean speedup {last.geomean_speedup:.3f}x over 13 extra only" in shown.stdout


def test_a_patch_that_serves_nothing_on_this_gpu_is_refused_there_and_its_twin_record_brings_it_back(
        tmp_path: Path, monkeypatch, capsys) -> None:
    """The rewrite's H200 record predates the S 512 twins, so its guard serves nothing on an H200. The plugin now
    refuses it there with the reason and the command, instead of installing a hook that hands every call on; the
    record that times the twins there still checks it (on its union boxes, as on a GPU new to it), and its guard
    is derived again although it lost nowhere, so the H200 serves where it won at both ends. The twin times are
    SYNTHETIC (the shipped H100 twin record, moved to an H200 and made to win)."""
    from types import SimpleNamespace

    from astra_sglang import platform_info
    from astra_sglang.cli.patches_cmd import _record
    from astra_sglang.patches.registry import device_problem, find

    h100, h200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
    shutil.copytree(REPO / "patches", tmp_path / "patches")
    e = find("mr-da2-single-r1", tmp_path / "patches")
    m = e.manifest
    assert m is not None
    refused = device_problem(m, "sm_90", h200)
    assert refused is not None and "serves no shape on NVIDIA H200" in refused and "--record" in refused
    assert device_problem(m, "sm_90", h100) is None
    assert m.guard.to_measure_on(h200).on_gpu(h200) is not None and m.guard.to_measure_on(h100) == m.guard
    twins = m.evidence.results[-1]
    assert twins.timing is not None and twins.timing.extra_only

    def wins(s):
        return s.model_copy(update={"speedup": 1.3, "candidate_us": s.original_us / 1.3, "verdict": "faster"})

    h = twins.model_copy(update={"device": f"{h200} (sm_90)", "timing": twins.timing.model_copy(update={
        "shapes": [wins(s) for s in twins.timing.shapes]})})
    monkeypatch.setattr(platform_info, "current", lambda: platform_info.Platform("sm_90", h200))
    _record(e, SimpleNamespace(arch="sm_90", op_manifest_sha256=m.op_manifest_sha256), h, [])
    assert "it served nothing on NVIDIA H200" in capsys.readouterr().out
    after = load_patch_manifest(e.path)
    here = after.guard.on_gpu(h200)
    assert here is not None and device_problem(after, "sm_90", h200) is None
    b1 = {"B": 1, "NK": 8, "G": 4, "D": 128, "MS": 8, "P": 1}
    assert here.accepts_dims(b1)  # won at S 1024 (the old H200 record) and at S 512 (these twins)
    assert after.guard.on_gpu(h100) == m.guard.on_gpu(h100)  # the H100's boxes as they were
