"""The registry and its CLI, in-process (no SGLang plugin loading here: see test_plugin_sglang.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from patch_support import copy_as_regular

from astra_sglang.cli.main import main
from astra_sglang.contract.op import entry_and_call, manifest_sha256
from astra_sglang.contract.patch import file_problem, load_patch_manifest, write_patch_manifest
from astra_sglang.contract.result import (
    BaselineShape,
    BuildReport,
    CorrectnessReport,
    EvalResult,
    ShapeTiming,
    SweepBaseline,
    TimingReport,
)
from astra_sglang.errors import AstraError
from astra_sglang.loop.records import TuneOutcome
from astra_sglang.loop.runfolder import RunFolder
from astra_sglang.patches import registry, status
from astra_sglang.patches.tooling.add import add_from_run

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "patches" / "silu_and_mul" / "triton-silu-and-mul-v1"
PID = "triton-silu-and-mul-v1"


@pytest.fixture
def root(tmp_path, monkeypatch):
    r = tmp_path / "patches"
    copy_as_regular(SHIPPED, r / "silu_and_mul" / PID)
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES_DIR", str(r))
    monkeypatch.setenv("ASTRA_SGLANG_STATE_FILE", str(tmp_path / "state.json"))
    monkeypatch.delenv("ASTRA_SGLANG_PATCHES", raising=False)
    return r


def _result(speedup: float = 1.25) -> EvalResult:
    return EvalResult(
        op_id="activation.silu_and_mul", candidate="x.cuh", device="NVIDIA H200 (sm_90)", sglang_version="0.5.23",
        build=BuildReport(ok=True), correctness=CorrectnessReport(ok=True, cases_run=40, heldout_cases_run=8),
        timing=TimingReport(method="cuda-graph replay", copy_ceiling_gbps=4000.0, geomean_speedup=speedup, shapes=[
            ShapeTiming(dims={"T": 64, "H": 4096}, dtype="bfloat16", original_us=5.0, candidate_us=4.0,
                        spread_pct=0.5, speedup=speedup, verdict="faster", bytes_moved=1 << 20,
                        original_gbps=200.0, original_pct_ceiling=5.0)]))


def test_shipped_patch_is_intact_labelled_and_pinned():
    m = load_patch_manifest(SHIPPED)
    assert file_problem(SHIPPED, m) is None
    assert m.provenance.kind == "hand-written"          # never presented as found by a model
    assert m.schema_version == 2 and m.source.file in {f.path for f in m.files}
    assert "0.5.23" in m.validated_on.sglang_versions


def test_altered_or_missing_file_is_reported(root):
    d = root / "silu_and_mul" / PID
    m = load_patch_manifest(d)
    (d / "kernel.py").write_text((d / "kernel.py").read_text() + "# x\n")
    assert "hash mismatch for kernel.py" in file_problem(d, m)
    (d / "kernel.py").unlink()
    assert file_problem(d, m) == "missing file kernel.py"
    m.files = []
    assert "not pinned" in file_problem(d, m)


@pytest.mark.parametrize("value,expected", [
    (None, None), ("", None), ("0", None), ("off", None), ("all", "all"), ("1", "all"),
    ("a, b,", {"a", "b"}),
])
def test_env_variable_parsing(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("ASTRA_SGLANG_PATCHES", raising=False)
    else:
        monkeypatch.setenv("ASTRA_SGLANG_PATCHES", value)
    assert registry.requested_ids() == expected


def test_disable_removes_from_all_but_an_explicit_list_still_rules(root):
    entries = registry.discover()
    assert [e.patch_id for e in registry.selected(entries, "all")[0]] == [PID]
    assert main(["patches", "disable", PID]) == 0
    assert registry.selected(entries, "all")[0] == []
    assert [e.patch_id for e in registry.selected(entries, PID)[0]] == [PID]
    assert registry.selected(entries, "nope")[1] == ["nope"]
    assert main(["patches", "enable", PID]) == 0
    assert [e.patch_id for e in registry.selected(entries, "all")[0]] == [PID]
    assert main(["patches", "disable", "no-such"]) == 2   # a typo is an error, not a silent no-op


def test_the_retired_test_vehicle_serves_only_where_named(monkeypatch, tmp_path):
    """The slower silu_and_mul vehicle is out of ASTRA_SGLANG_PATCHES=all; the real patches stay in it."""
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES_DIR", str(SHIPPED.parent.parent))
    monkeypatch.setenv("ASTRA_SGLANG_STATE_FILE", str(tmp_path / "state.json"))
    entries = registry.discover()
    everything = [e.patch_id for e in registry.selected(entries, "all")[0]]
    assert PID not in everything and {e.op for e in registry.selected(entries, "all")[0]} >= {"merge_state",
                                                                                                "fused_add_rmsnorm"}
    assert [e.patch_id for e in registry.selected(entries, PID)[0]] == [PID]
    assert load_patch_manifest(SHIPPED).in_all is False


def test_all_stacks_the_decode_attention_rewrite_in_front_of_its_retune(monkeypatch, tmp_path, capsys):
    """`validate` passed the pair as a stack (H100, 2026-12-06: tokens within thresholds, the retune serving 228
    calls, the rewrite 12), so `all` now holds the retune too, installed behind the rewrite, which hands it every
    call outside its guard in front."""
    from astra_sglang.patches.install import stack_order

    monkeypatch.setenv("ASTRA_SGLANG_PATCHES_DIR", str(REPO / "patches"))
    monkeypatch.setenv("ASTRA_SGLANG_STATE_FILE", str(tmp_path / "state.json"))
    chosen = registry.selected(registry.discover(), "all")[0]
    da = [e.patch_id for e in stack_order(chosen) if e.op == "decode_attention"]
    assert da == ["sglang-retuned-da", "mr-da2-single-r1"]  # innermost first
    rewrite = next(e for e in chosen if e.patch_id == "mr-da2-single-r1").manifest
    assert "sglang-retuned-da" in rewrite.guard_in_front
    assert main(["patches", "list", "--json"]) == 0
    rows = {r["patch_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["sglang-retuned-da"]["provenance"] == "retune (sweep)" and rows["sglang-retuned-da"]["in_all"]
    assert rows["mr-da2-single-r1"]["provenance"] == "run"


def test_applicability_reasons(root):
    e = registry.discover()[0]
    assert registry.static_problem(e, "0.5.23") is None
    assert "SGLang 0.5.24 installed" in registry.static_problem(e, "0.5.24")
    assert registry.static_problem(e, None) == "SGLang is not installed"
    assert registry.device_problem(e.manifest, None) == "no CUDA device"
    assert "validated on cpu-interpret" in registry.device_problem(e.manifest, "sm_90")
    assert registry.device_problem(e.manifest, "cpu-interpret") is None
    m = e.manifest.model_copy(update={"validated_on": e.manifest.validated_on.model_copy(update={"archs": ["sm_90a"]})})
    assert registry.device_problem(m, "sm_90") is None          # sm_90a build target == sm_90 device


def test_a_patch_measured_on_one_gpu_model_leaves_another_of_its_arch_to_sglang(root):
    """An H100 and an H200 are both sm_90, with 30% apart in bandwidth: a guard is where the patch won on the GPU
    it was measured on, so on another model SGLang's kernel serves until the patch is measured there."""
    e = registry.discover()[0]
    vo = e.manifest.validated_on.model_copy(update={"archs": ["sm_90"], "gpus": ["NVIDIA H200"]})
    m = e.manifest.model_copy(update={"validated_on": vo})
    assert registry.device_problem(m, "sm_90", "NVIDIA H200") is None
    assert registry.device_problem(m, "sm_90", "nvidia  h200") is None          # one model, other spelling
    why = registry.device_problem(m, "sm_90", "NVIDIA H100 80GB HBM3")
    assert why is not None and why.startswith("GPU NVIDIA H100 80GB HBM3, patch measured on NVIDIA H200"), why
    assert f"patches verify {m.patch_id} --record" in why
    unrecorded = m.model_copy(update={"validated_on": vo.model_copy(update={"gpus": []})})
    assert registry.device_problem(unrecorded, "sm_90", "NVIDIA H100 80GB HBM3") is None  # older manifests
    for shipped in registry.discover(REPO / "patches"):
        if "sm_90" in shipped.manifest.validated_on.archs:  # every GPU patch says where it was measured
            assert shipped.manifest.validated_on.gpus, shipped.patch_id  # (sglang-retuned-da: the H100 alone)


def test_a_patch_on_a_gpu_it_was_never_measured_on_is_not_applicable_not_a_failed_check(root, monkeypatch):
    """H100, 2026-12-05: a patch measured on H200s only fell back (right) but said "failed: ..." in its first-call
    check, so `validate` failed every H100 server run with ASTRA_SGLANG_PATCHES=all. Not being measured on a GPU
    is the guard at work: the original serves, the warning says why, and no check failed."""
    from astra_sglang.patches import runtime
    from astra_sglang.platform_info import Platform

    e = registry.discover()[0]
    vo = e.manifest.validated_on.model_copy(update={"archs": ["sm_90"], "gpus": ["NVIDIA H200"]})
    m = e.manifest.model_copy(update={"validated_on": vo})
    monkeypatch.setattr(runtime, "of_device", lambda device: Platform(arch="sm_90", name="NVIDIA H100 80GB HBM3"))
    status.reset(PID)
    rt = runtime.PatchRuntime(e.path, m)
    assert rt.activate("cuda", lambda *a, **k: None) is False
    st = status.statuses()[PID]
    assert st.state == "inapplicable" and st.reason.startswith("GPU NVIDIA H100 80GB HBM3, patch measured on")
    assert st.first_call_check.startswith("not applicable: GPU NVIDIA H100")
    assert rt.activate("cuda", lambda *a, **k: None) is False   # decided once: no rebuild, no second warning
    status.reset(PID)


def test_list_and_show(root, capsys, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert main(["patches", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["patch_id"] == PID and rows[0]["enabled"] and not rows[0]["active_in_env"]
    assert rows[0]["applicable"] and rows[0]["validated_here"]
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES", PID)
    assert main(["patches", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["active_in_env"] and not rows[0]["applicable"] and rows[0]["why_not"] == "no CUDA device"
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES", "all")
    assert main(["patches", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["active_in_env"]
    # as shipped, the vehicle has in_all false: `all` leaves it out, and the list said it was active
    write_patch_manifest(root / "silu_and_mul" / PID, load_patch_manifest(SHIPPED))
    assert main(["patches", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert not rows[0]["in_all"] and not rows[0]["active_in_env"], rows[0]
    assert main(["patches", "list"]) == 0
    assert "named only (not in all)" in capsys.readouterr().out
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES", PID)
    assert main(["patches", "list"]) == 0
    assert PID in capsys.readouterr().out
    assert main(["patches", "show", PID]) == 0
    out = capsys.readouterr().out
    assert "hand-written" in out and "sglang.kernels.ops.activation.activation.silu_and_mul" in out
    assert main(["patches", "show", "nope"]) == 2


def test_add_is_one_command_with_evidence(root, tmp_path, capsys):
    src = tmp_path / "my_kernel.cuh"  # a real kernel: add screens and builds it (tests/test_patches_add_checks.py)
    src.write_text((REPO / "tests" / "candidates" / "silu_and_mul" / "hand_written.cuh").read_text())
    ev = tmp_path / "eval.json"
    ev.write_text(_result().model_dump_json())
    assert main(["patches", "add", "--op", "silu_and_mul", "--source", str(src), "--id", "hw-silu",
                 "--provenance", "hand-written", "--evidence", str(ev), "--author", "dev"]) == 0
    d = root / "silu_and_mul" / "hw-silu"
    m = load_patch_manifest(d)
    assert m.source.kind == "cuda_jit" and m.source.file == "kernel.cuh" and m.op == "silu_and_mul"
    assert m.op_manifest_sha256 == manifest_sha256(REPO / "extracted" / "silu_and_mul")
    assert m.validated_on.sglang_versions == ["0.5.23"] and m.validated_on.archs == ["sm_90"]
    assert m.evidence.results[0].geomean_speedup == 1.25
    assert m.targets == ["sglang.kernels.ops.activation.activation.silu_and_mul"]
    assert file_problem(d, m) is None
    assert main(["patches", "add", "--op", "silu_and_mul", "--source", str(src), "--id", "hw-silu",
                 "--provenance", "hand-written"]) == 2     # exists: refuse without --force
    capsys.readouterr()
    assert main(["patches", "show", "hw-silu"]) == 0
    assert "1.250x" in capsys.readouterr().out


def test_targets_must_be_call_sites_binding_the_ops_own_function(root, tmp_path):
    from astra_sglang.contract.patch import Provenance
    from astra_sglang.errors import AstraError
    from astra_sglang.patches.tooling.add import add_patch

    src = tmp_path / "k.py"
    src.write_text("def merge_state_triton(*a):\n    pass\n")
    prov = Provenance(kind="hand-written")
    with pytest.raises(AstraError, match="target sglang.srt.layers.activation.silu_and_mul is not among "
                                         "silu_and_mul's call sites"):
        add_patch("silu_and_mul", src, patch_id="a", provenance=prov, targets=["sglang.srt.layers.activation.silu_and_mul"])
    with pytest.raises(AstraError, match="binds flashinfer_merge_state, which is not the same function"):
        add_patch("merge_state", src, patch_id="b", provenance=prov, targets=["flashinfer.cascade.merge_state"])
    with pytest.raises(AstraError, match="a cuda_jit kernel cannot be built against it"):
        add_patch("merge_state", src, patch_id="c", provenance=prov, kind="cuda_jit")
    assert not (root / "merge_state").exists()               # nothing written for a refused patch
    # a manifest edited afterwards is refused where the plugin installs it, with the same reason
    e = registry.discover()[0]
    bad = e.manifest.model_copy(update={"targets": ["sglang.srt.layers.activation.silu_and_mul"]})
    assert "is not among silu_and_mul's call sites" in registry.op_problem(bad)
    stale = e.manifest.model_copy(update={"op_manifest_sha256": "0" * 64})
    assert "changed since the patch was validated" in registry.static_problem(
        registry.PatchEntry(e.patch_id, e.op, e.path, stale), "0.5.23")


def test_add_with_evidence_serves_only_where_the_evidence_won(root, tmp_path):
    """`patches add --evidence` once kept the adapter's widest guard (a decode_attention patch: G 1..16, D 64..256,
    none of it measured) while `add-run` derived it from the same kind of evidence."""
    src = tmp_path / "my_kernel.cuh"
    src.write_text((REPO / "tests" / "candidates" / "silu_and_mul" / "hand_written.cuh").read_text())
    r = _result()
    lose = r.timing.shapes[0].model_copy(update={"dims": {"T": 512, "H": 4096}, "candidate_us": 5.5,
                                                 "speedup": 0.91, "verdict": "slower"})
    r = r.model_copy(update={"timing": r.timing.model_copy(update={"shapes": [r.timing.shapes[0], lose]})})
    ev = tmp_path / "eval.json"
    ev.write_text(r.model_dump_json())
    assert main(["patches", "add", "--op", "silu_and_mul", "--source", str(src), "--id", "hw-guarded",
                 "--provenance", "hand-written", "--evidence", str(ev)]) == 0
    m = load_patch_manifest(root / "silu_and_mul" / "hw-guarded")
    assert m.guard.accepts_dims({"T": 64, "H": 4096}) and not m.guard.accepts_dims({"T": 512, "H": 4096})
    assert not m.guard.accepts_dims({"T": 64, "H": 8192})                   # never measured: not served
    assert any(n.startswith("guard derived from 2 measured shape(s)") for n in m.evidence.notes)
    assert [(row.dims["T"], row.served) for row in m.evidence.guard_table] == [(64, True), (512, False)]
    assert m.validated_on.archs == ["sm_90"] and m.validated_on.gpus == ["NVIDIA H200"]  # from the evidence's device


def test_add_from_run_copies_the_winner(root, tmp_path):
    run = tmp_path / "runs" / "merge_state" / "run-7"
    (run / "best").mkdir(parents=True)
    (run / "best" / "candidate.py").write_text("def merge_state_triton(*a):\n    pass\n")
    (run / "best" / "result.json").write_text(_result(1.4).model_dump_json())
    (run / "run.json").write_text(json.dumps({"model": "o4-mini", "rounds": 5}))
    d = add_from_run(run)
    m = load_patch_manifest(d)
    assert d == root / "merge_state" / "run-7"
    assert m.provenance.kind == "run" and m.provenance.model == "o4-mini" and m.provenance.rounds == 5
    assert m.source.kind == "triton" and entry_and_call(registry.load_op(m), "triton")[0] == "merge_state_triton"
    assert m.evidence.results[0].geomean_speedup == 1.4
    with pytest.raises(AstraError, match="does not exist"):
        add_from_run(tmp_path / "empty")
    (tmp_path / "two" / "best").mkdir(parents=True)
    for name in ("a.py", "b.py"):
        (tmp_path / "two" / "best" / name).write_text("")
    with pytest.raises(AstraError, match="expected one kernel source"):
        add_from_run(tmp_path / "two")
    # a run whose rounds produced no correct candidate has no best/: say so, not "found 0 kernel sources"
    lost = tmp_path / "runs" / "merge_state" / "run-8"
    lost.mkdir(parents=True)
    (lost / "run.json").write_text(json.dumps({"model": "o4-mini", "rounds": 5}))
    with pytest.raises(AstraError, match="has no winner"):
        add_from_run(lost)


def _run_with_sweep(tmp_path: Path, name: str, winner: float, sweep: float) -> Path:
    run = tmp_path / "runs" / "merge_state" / name
    (run / "best").mkdir(parents=True)
    (run / "best" / "candidate.py").write_text("def merge_state_triton(*a):\n    pass\n")
    (run / "best" / "result.json").write_text(_result(winner).model_dump_json())
    (run / "best" / "summary.json").write_text(json.dumps({
        "model": "file:/m", "rounds": 3, "mode": "multi-agent", "candidates_per_round": 4, "source_sha256": "ab" * 32,
        "label": "SCRIPTED run written by the tests"}))
    RunFolder(run).save_step(0, "tune", TuneOutcome(baseline=SweepBaseline(  # what optimize's round 0 writes
        op_id="attention.merge_state_triton", sglang_version="0.5.23", device="NVIDIA H200 (sm_90)",
        parameters={"num_warps": [1, 4]}, original_config={"num_warps": "4"}, configs=[],
        shapes=[BaselineShape(dims={"T": 64, "H": 4096}, dtype="bfloat16", original_us=5.0,
                              best_config={"num_warps": 1}, best_us=5.0 / sweep, speedup=sweep)])))
    return run


def test_add_run_records_the_run_and_refuses_a_winner_the_sweep_baseline_matches(root, tmp_path):
    """A run winner ships with its run's label, mode and source hash, and its margin over the round-0 sweep of the
    original's own tunables; a winner no faster than that sweep is refused (a sweep of SGLang's kernel would do)."""
    m = load_patch_manifest(add_from_run(_run_with_sweep(tmp_path, "wins", winner=1.4, sweep=1.05)))
    p = m.provenance
    assert (p.label, p.mode, p.candidate_sha256) == ("SCRIPTED run written by the tests", "multi-agent, K=4", "ab" * 32)
    assert any("the winner beats it on every timed shape: 64x4096 bfloat16: 1.400x vs sweep 1.050x" in n
               for n in m.evidence.notes)
    slow = _run_with_sweep(tmp_path, "loses", winner=1.04, sweep=1.05)
    with pytest.raises(AstraError, match="does not beat the sweep baseline on 1 shape"):
        add_from_run(slow)
    assert not (root / "merge_state" / "loses").exists()
    forced = load_patch_manifest(add_from_run(slow, force=True))
    assert any("does NOT beat it on 1 shape(s)" in n for n in forced.evidence.notes)


def test_a_run_winner_guard_can_only_narrow_and_its_check_shapes_move_inside(root, tmp_path):
    """A winner slower than SGLang above 512 rows ships guarded to T <= 512, and the plugin's first-call check
    runs on shapes that guard really serves; widening the adapter's range is refused."""
    from astra_sglang.patches.adapters import get_adapter
    from astra_sglang.patches.tooling.add import narrowed_guard

    base = get_adapter("merge_state").default_guard()
    with pytest.raises(AstraError, match="must lie inside the adapter's T range"):
        narrowed_guard(base, ["T=1:999999"])
    with pytest.raises(AstraError, match="expected DIM=MIN:MAX"):
        narrowed_guard(base, ["Q=1:4"])
    guard = narrowed_guard(base, ["T=512:65536", "D=128:256"])
    m = load_patch_manifest(add_from_run(_run_with_sweep(tmp_path, "narrow", winner=1.4, sweep=1.05), guard=guard))
    assert m.guard.dims["T"].min == 512 and m.guard.dims["D"].min == 128
    spec = m.guard.dims
    assert m.check_shapes and all(spec[k].accepts(v) for s in m.check_shapes for k, v in s.items() if k in spec)


def test_guard_checks_dtype_device_contiguity_alignment_and_dims():
    torch = pytest.importorskip("torch")
    from astra_sglang.patches.adapters import get_adapter, make_guard

    ad = get_adapter("silu_and_mul")
    guard = make_guard(load_patch_manifest(SHIPPED).guard, "cpu")
    ok = torch.randn(4, 256, dtype=torch.bfloat16)
    assert guard(ad.prepare(ok))
    assert not guard(ad.prepare(ok.float()))                                   # dtype
    assert not guard(ad.prepare(torch.randn(4, 264, dtype=torch.bfloat16)[:, :256]))  # contiguity
    assert not guard(ad.prepare(torch.randn(4 * 256 + 1, dtype=torch.bfloat16)[1:].view(4, 256)))  # alignment
    assert not guard(ad.prepare(torch.randn(4, 2 * 12, dtype=torch.bfloat16)))  # H % 8
    assert ad.prepare(ok, None, torch.zeros(4, dtype=torch.int32)) is None      # MoE form: not served
    assert not make_guard(load_patch_manifest(SHIPPED).guard, "cuda")(ad.prepare(ok))  # device


def test_counters_count_real_calls_through_an_installed_hook(root, monkeypatch):
    """The shipped Triton patch, run by the Triton interpreter: calls the guard accepts are served by the patch,
    the rest by the original, and ``counters()`` says so."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("the CPU path (TRITON_INTERPRET=1)")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    import torch.nn.functional as F

    import astra_sglang.patches as patches
    from astra_sglang.patches.runtime import PatchRuntime

    calls = []

    def original(input, out=None, expert_ids=None, expert_step=1, **kw):
        calls.append(input.dtype)
        d = input.shape[-1] // 2
        out = input.new_empty(*input.shape[:-1], d) if out is None else out
        return out.copy_(F.silu(input[..., :d].float()) * input[..., d:].float())

    e = registry.discover()[0]
    status.reset(PID)
    hook = PatchRuntime(e.path, e.manifest).hook_for(original, e.manifest.targets[0])
    assert patches.counters()[PID] == {"patch": 0, "original": 0}
    x = torch.randn(4, 256).to(torch.bfloat16)
    y = hook(x)                                             # activation (checked against `original`), then served
    assert patches.statuses()[PID].state == "active"
    n_check = len(calls)                                    # the activation check ran the original itself
    assert patches.counters()[PID] == {"patch": 1, "original": 0}
    assert torch.allclose(y.float(), original(x).float(), atol=2e-2, rtol=2e-2)
    hook(torch.randn(4, 256))                               # float32: outside the guard
    hook(x, None, torch.zeros(4, dtype=torch.int32))        # MoE form: not served
    assert patches.counters()[PID] == {"patch": 1, "original": 2}
    assert calls[n_check + 1:] == [torch.float32, torch.bfloat16]
    status.reset(PID)


def test_serve_runs_sglang_launch_server_with_patches(monkeypatch, capsys):
    monkeypatch.delenv("ASTRA_SGLANG_PATCHES", raising=False)
    seen = {}
    monkeypatch.setattr("os.execvpe", lambda f, argv, env: seen.update(argv=argv, env=env))
    assert main(["serve", "--", "--model-path", "m", "--tp", "2"]) == 0
    assert seen["argv"][1:] == ["-m", "sglang.launch_server", "--model-path", "m", "--tp", "2"]
    assert seen["env"]["ASTRA_SGLANG_PATCHES"] == "all"
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES", "a,b")
    assert main(["serve", "--dry-run", "--", "--port", "1"]) == 0
    assert capsys.readouterr().out.startswith("ASTRA_SGLANG_PATCHES=a,b ")


def test_every_shipped_patch_hooks_the_kernel_sglang_serves_for_its_op():
    """A patch measured against what SGLang serves must replace that kernel: fused-add-rmsnorm-mr-k4 once hooked
    the JIT entry point, which RMSNorm reaches only with cast_x_before_out_mul=True, so a LLaMA server never
    called it (found on the way to the server A/B run)."""
    from astra_sglang.contract.patch import served_targets
    from astra_sglang.patches.registry import discover, load_op

    entries = discover()
    assert entries
    for e in entries:
        assert e.manifest.targets == served_targets(load_op(e.manifest)), e.manifest.patch_id
    fused = [e for e in entries if e.manifest.op == "fused_add_rmsnorm"]
    assert fused and all(e.manifest.targets == ["sgl_kernel.fused_add_rmsnorm"] for e in fused)


def test_verify_under_the_interpreter_leaves_a_dtype_it_computes_wrongly_unjudged():
    """The decode-attention patch serves bfloat16 only, which the Triton interpreter computes on raw bits for
    that op (contract validation leaves it out by name). `patches verify` under TRITON_INTERPRET=1 said FAILED
    (448 of 2000 elements off SGLang's original, both run by the interpreter): NOT VERIFIED, with why, instead."""
    from astra_sglang import platform_info
    from astra_sglang.patches.tooling.verify import unverifiable_here

    da = load_patch_manifest(REPO / "patches" / "decode_attention" / "mr-da2-single-r1")
    assert da.guard.dtypes == ["bfloat16"]
    why = unverifiable_here(da, platform_info.CPU_INTERPRET_ARCH)
    assert why is not None and "interpreter cannot check bfloat16" in why and "GPU host" in why
    fp16 = da.model_copy(update={"guard": da.guard.model_copy(update={"dtypes": ["float16", "bfloat16"]})})
    assert unverifiable_here(fp16, platform_info.CPU_INTERPRET_ARCH) is None  # float16 is still checked there
    assert unverifiable_here(da, "sm_90") is None
    ms = load_patch_manifest(REPO / "patches" / "merge_state" / "merge-state-mr-k1")
    assert unverifiable_here(ms, platform_info.CPU_INTERPRET_ARCH) is None  # no interpreter limit


def test_the_decode_attention_patch_serves_under_all_once_run_inside_sglang(monkeypatch, tmp_path):
    """mr-da2-single-r1 joined ASTRA_SGLANG_PATCHES=all only after `validate` (tokens) passed and `e2e` measured a
    decode-step gain inside SGLang's forward (H100, 2026-12-05); its manifest keeps both verdicts beside the harness's."""
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES_DIR", str(REPO / "patches"))
    monkeypatch.setenv("ASTRA_SGLANG_STATE_FILE", str(tmp_path / "state.json"))
    entries = registry.discover()
    assert "mr-da2-single-r1" in [e.patch_id for e in registry.selected(entries, "all")[0]]
    notes = load_patch_manifest(REPO / "patches" / "decode_attention" / "mr-da2-single-r1").evidence.notes
    assert any(n.startswith("validate (tokens) on ") and ": PASS" in n for n in notes)
    assert any(n.startswith("e2e on ") and "bs 128 0.899 [0.869, 0.934]" in n for n in notes)
