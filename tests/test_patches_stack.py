"""A rewrite with SGLang's own kernel retuned behind it, on one call site: the rewrite serves its guard, the retune
what the rewrite leaves, SGLang's original the rest (decode attention: the shipped rewrite is slower at B 17..127,
where a retune's configs win). The rewrite is merge-state-mr-k1 (a MODEL RUN's kernel, shipped), the retune comes
from a SCRIPTED sweep (test_patches_retune.py); both run under TRITON_INTERPRET=1 against merge_state's real
original, rebuilt from extracted/merge_state. Nothing here is timed."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from test_patches_retune import SMALL, _scripted_sweep, _write

from astra_sglang.cli.main import main

REPO = Path(__file__).resolve().parents[1]
REWRITE = {"T": 32, "NH": 8, "D": 128}  # inside mr-k1's measured region for 8 heads (T 32..2048)
NEITHER = {"T": 5, "NH": 3, "D": 128}  # in neither guard


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES_DIR", str(tmp_path / "patches"))
    monkeypatch.setenv("ASTRA_SGLANG_STATE_FILE", str(tmp_path / "state.json"))
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES", "rt-merge,merge-state-mr-k1")
    return tmp_path / "patches"


def _args(torch: Any, dims: dict[str, int]) -> list[Any]:
    t, nh, d = dims["T"], dims["NH"], dims["D"]
    return [torch.randn(t, nh, d).bfloat16(), torch.randn(t, nh), torch.randn(t, nh, d).bfloat16(),
            torch.randn(t, nh)]


def _both(root: Path, tmp_path: Path) -> None:
    from astra_sglang.contract.patch import load_patch_manifest, write_patch_manifest

    assert main(["patches", "add-retune", "merge_state", "--sweep", str(_write(tmp_path, _scripted_sweep())),
                 "--id", "rt-merge", "--not-in-all"]) == 0
    shutil.copytree(REPO / "patches" / "merge_state" / "merge-state-mr-k1", root / "merge_state" / "merge-state-mr-k1")
    for pid, check in (("rt-merge", SMALL), ("merge-state-mr-k1", REWRITE)):
        d = root / "merge_state" / pid
        m = load_patch_manifest(d)
        m.check_shapes = [check]  # one each: the interpreter is slow
        if pid == "merge-state-mr-k1":  # its measured region for 8 heads alone, so SMALL is the retune's to serve
            m.guard.regions = [r for r in m.guard.regions if r["NH"].min == 8]
            assert m.guard.regions and m.guard.accepts_dims(REWRITE) and not m.guard.accepts_dims(SMALL)
        m.validated_on.archs.append("cpu-interpret")  # this host: the interpreter stands in for the GPU
        m.validated_on.gpus = []
        write_patch_manifest(d, m)


def test_a_rewrite_serves_its_guard_and_hands_the_rest_to_the_retune_behind_it(
        root, tmp_path, monkeypatch, interpreted_merge_state):
    torch = interpreted_merge_state
    from astra_sglang.patches import install, status
    from astra_sglang.patches.registry import discover
    from astra_sglang.patches.tooling.devcheck import extracted_original

    _both(root, tmp_path)
    original = extracted_original(discover()[0])
    monkeypatch.setattr(install, "resolve_target", lambda target: original)
    status.reset()
    hooked: dict[str, Any] = {}
    installed = install.install_selected(lambda target, orig, hook: hooked.__setitem__(target, hook))
    assert sorted(installed) == ["merge-state-mr-k1", "rt-merge"]
    (hook,) = hooked.values()  # one registration: the rewrite's stand-in, the retune's behind it
    for dims in (REWRITE, SMALL, NEITHER):
        args = _args(torch, dims)
        out, lse = hook(*args)
        ref_out, ref_lse = original(*args)
        assert torch.allclose(out.float(), ref_out.float(), atol=2e-2, rtol=2e-2), dims
        assert torch.allclose(lse, ref_lse, atol=1e-3, rtol=1e-3), dims
    s = status.statuses()
    rewrite, retune = s["merge-state-mr-k1"], s["rt-merge"]
    assert (rewrite.state, retune.state) == ("active", "active"), (rewrite.reason, retune.reason)
    assert (rewrite.served_by_patch, rewrite.passed_on, rewrite.served_by_original) == (1, 2, 0)
    assert (retune.served_by_patch, retune.served_by_original) == (1, 1)  # NEITHER: SGLang's original


def test_two_rewrites_of_one_op_are_never_stacked_and_the_retune_stands_behind_whatever_the_order(
        root, tmp_path, restored_op):
    """Two rewrites would overlap where neither was measured against the other: the second is refused with one
    line. The retune goes behind the rewrite even when it is named first."""
    restored_op("merge_state")
    from astra_sglang.patches import install, status

    _both(root, tmp_path)
    shutil.copytree(root / "merge_state" / "merge-state-mr-k1", root / "merge_state" / "merge-state-mr-k1b")
    from astra_sglang.contract.patch import load_patch_manifest, write_patch_manifest

    d = root / "merge_state" / "merge-state-mr-k1b"
    m = load_patch_manifest(d)
    m.patch_id = "merge-state-mr-k1b"
    write_patch_manifest(d, m)
    status.reset()
    order: list[str] = []
    install.resolve_target = lambda target: (lambda *a, **k: None)  # type: ignore[assignment]
    try:
        installed = install.install_selected(lambda target, orig, hook: order.append(hook.astra_patch_id),
                                             value="rt-merge,merge-state-mr-k1,merge-state-mr-k1b")
    finally:
        import pkgutil

        install.resolve_target = pkgutil.resolve_name  # type: ignore[assignment]
    assert sorted(installed) == ["merge-state-mr-k1", "rt-merge"]
    assert order == ["merge-state-mr-k1"]  # the outermost stand-in is the rewrite's
    refused = status.statuses()["merge-state-mr-k1b"]
    assert refused.state == "failed" and "already patched by merge-state-mr-k1" in refused.reason


def test_a_stacked_placebo_runs_both_hooks_host_work_and_sglangs_original_serves(root, tmp_path, monkeypatch,
                                                                                 restored_op):
    """e2e's C arm: the hooks of both patches are installed and do their host work, every call is SGLang's."""
    restored_op("merge_state")
    torch = pytest.importorskip("torch")
    from astra_sglang.patches import install, status
    from astra_sglang.patches.env import ENV_PLACEBO

    _both(root, tmp_path)
    monkeypatch.setenv(ENV_PLACEBO, "1")
    calls: list[int] = []

    def sglang(*args: Any, **kwargs: Any) -> str:
        calls.append(args[0].shape[0])
        return "sglang"

    monkeypatch.setattr(install, "resolve_target", lambda target: sglang)
    status.reset()
    hooked: dict[str, Any] = {}
    install.install_selected(lambda target, orig, hook: hooked.__setitem__(target, hook))
    (hook,) = hooked.values()
    assert [hook(*_args(torch, dims)) for dims in (REWRITE, SMALL, NEITHER)] == ["sglang"] * 3
    assert calls == [32, 8, 5]
    s = status.statuses()
    assert (s["merge-state-mr-k1"].passed_on, s["merge-state-mr-k1"].served_by_patch) == (3, 0)
    assert (s["rt-merge"].served_by_original, s["rt-merge"].served_by_patch) == (3, 0)


def test_patches_status_shows_what_a_rewrite_passed_on_beside_what_it_served(tmp_path, capsys):
    from astra_sglang.contract.status import PatchCounts, ProcessStatus

    d = tmp_path / "pg-1"
    d.mkdir()
    for pid in (999998, 999999):  # two scheduler processes: the counts add up
        rec = ProcessStatus(pid=pid, pgid=1, started=0.0, updated=0.0, exited=True, patches=[
            PatchCounts(patch_id="rewrite", op="decode_attention", state="active", served_by_patch=10, passed_on=3),
            PatchCounts(patch_id="retune", op="decode_attention", state="active", served_by_patch=2,
                        served_by_original=1)])
        (d / f"{pid}.json").write_text(rec.model_dump_json())
    assert main(["patches", "status", "--dir", str(d)]) == 0
    out = capsys.readouterr().out
    assert "passed on" in out
    header = next(line.split() for line in out.splitlines() if line.startswith("patch "))
    assert header[:12] == ["patch", "op", "state", "per", "process", "patch", "calls", "original", "calls", "passed",
                           "on", "captured"]
    row = next(line.split() for line in out.splitlines() if line.startswith("rewrite"))
    assert row[4:7] == ["20", "0", "6"]  # patch calls, original calls, passed on: summed over both processes


def test_each_ops_retune_is_installed_right_behind_its_rewrite_in_a_chain_of_ops() -> None:
    """The two fused-MoE GEMMs chain on one call site; with a retune of one of them, the rewrite must sit right in
    front of its own retune (passing it the calls of its form it does not serve), not in front of the other op's."""
    from types import SimpleNamespace

    from astra_sglang.patches.install import stack_order

    def entry(pid: str, op: str, retune: bool) -> SimpleNamespace:
        return SimpleNamespace(patch_id=pid, manifest=SimpleNamespace(op=op, source=SimpleNamespace(retune=retune)))

    chosen = [entry("down", "fused_moe_down", False), entry("up", "fused_moe_kernel", False),
              entry("up-rt", "fused_moe_kernel", True), entry("bad", "", False)]
    chosen[3].manifest = None
    assert [e.patch_id for e in stack_order(chosen)] == ["down", "up-rt", "up", "bad"]


def test_e2e_counts_a_stacked_rewrite_as_reached_and_sums_what_it_passed_on() -> None:
    """An e2e B process where the rewrite passed every call on to the retune behind it (a batch outside its guard):
    the rewrite was reached, so it is in the verdict; serving nothing there is what its guard says (the retune
    served them), said as such and no problem; its passed-on calls are summed per arm."""
    from astra_sglang.e2e.runner import ArmRun, E2EConfig, PatchCount, not_reached, patch_calls, problems, shadowed_runs

    cfg = E2EConfig(forward=["f"], one_batch_args=["--model-path", "M"], patches="rewrite,retune")

    def arm(a: str, i: int, rewrite: PatchCount, retune: PatchCount) -> ArmRun:
        return ArmRun(round=1, arm=a, position=i, command=["f"], env={}, seconds=1.0, results=[],
                      patches=[] if a == "A" else [rewrite, retune])
    runs = [arm("A", 0, PatchCount(patch_id="rewrite"), PatchCount(patch_id="retune")),
            arm("B", 1, PatchCount(patch_id="rewrite", state="active", passed_on=64),
                PatchCount(patch_id="retune", state="active", served_by_patch=64)),
            arm("C", 2, PatchCount(patch_id="rewrite", state="active", passed_on=64),
                PatchCount(patch_id="retune", state="active", served_by_original=64))]
    assert not_reached(cfg, runs) == []
    assert problems(cfg, runs) == []
    assert shadowed_runs(cfg, runs) == ["rewrite served no call in the B process(es) of round(s) 1: it passed every "
                                        "call on to the patch stacked behind it, which served them"]
    rows = {(r.patch_id, r.arm): r for r in patch_calls(runs)}
    assert (rows[("rewrite", "B")].passed_on, rows[("retune", "B")].served_by_patch) == (64, 64)


def _stack_runs(b_rewrite: Any, b_retune: Any) -> list[Any]:
    """One in-process round at a batch the rewrite's guard holds: A and C pass through both hooks to SGLang's
    original (the rewrite disabled passes on, the retune disabled calls the original), B as given."""
    from astra_sglang.e2e.runner import ArmRun, PatchCount

    def arm(a: str, i: int, rewrite: PatchCount, retune: PatchCount) -> ArmRun:
        return ArmRun(round=1, arm=a, position=i, command=["f"], env={}, seconds=1.0, results=[],
                      patches=[rewrite, retune])
    idle = (PatchCount(patch_id="rewrite", state="disabled", passed_on=192),
            PatchCount(patch_id="retune", state="disabled", served_by_original=192))
    return [arm("A", 0, *idle), arm("B", 1, b_rewrite, b_retune), arm("C", 2, *idle)]


def test_e2e_takes_a_retune_that_its_rewrite_left_no_call_as_no_problem() -> None:
    """2026-12-06, e2e --in-process at context 8160, batch 1 and 16, rewrite + retune: the rewrite served every
    call, none reached the retune behind it, and e2e refused a 0.742 [0.736, 0.753] decode B/A with its placebo at
    1.007 as "patch sglang-retuned-da served no calls". Not reached is no fall back; a retune that fell back (calls
    served by SGLang's original) still is a problem."""
    from astra_sglang.e2e.runner import E2EConfig, PatchCount, problems, shadowed_runs

    cfg = E2EConfig(forward=["f"], one_batch_args=["--model-path", "M"], patches="rewrite,retune")
    runs = _stack_runs(PatchCount(patch_id="rewrite", state="active", served_by_patch=192),
                       PatchCount(patch_id="retune", state="active"))
    assert problems(cfg, runs) == []
    assert shadowed_runs(cfg, runs) == ["retune served no call in the B process(es) of round(s) 1: the patch "
                                        "stacked in front of it served every call"]
    fell_back = _stack_runs(PatchCount(patch_id="rewrite", state="active", served_by_patch=96, passed_on=96),
                            PatchCount(patch_id="retune", state="failed", served_by_original=96,
                                       reason="first-call check failed"))
    assert problems(cfg, fell_back) == ["patch retune served no calls in round 1's B process "
                                        "(state failed: first-call check failed)"]
    assert shadowed_runs(cfg, fell_back) == []


def _front_leaving_rewrite(root: Path, tmp_path: Path) -> Any:
    """Both patches, the rewrite with a guard in front of the retune that leaves it REWRITE's shape (its own guard
    takes it); the rewrite's guard in front, as written to its manifest."""
    from astra_sglang.contract.patch import load_patch_manifest, write_patch_manifest

    _both(root, tmp_path)
    folder = root / "merge_state" / "merge-state-mr-k1"
    m = load_patch_manifest(folder)
    front = m.guard.model_copy(deep=True)
    for r in front.regions:
        r["T"] = r["T"].model_copy(update={"min": REWRITE["T"] + 1})
    assert m.guard.accepts_dims(REWRITE) and not front.accepts_dims(REWRITE)
    m.guard_in_front = {"rt-merge": front}
    m.check_shapes = [dict(REWRITE, T=64)]
    write_patch_manifest(folder, m)
    return front


def test_in_front_of_its_retune_a_rewrite_serves_its_guard_in_front_and_alone_its_own(
        root, tmp_path, monkeypatch, interpreted_merge_state):
    """``guard_in_front`` (`patches guard ID --behind RETUNE`): stacked, the rewrite hands the retune the shapes
    where the retune beat it (decode attention at B 128 on the H100, 2026-12-06), and alone it keeps serving its
    own guard there, since SGLang's original is what it beat."""
    torch = interpreted_merge_state
    from astra_sglang.contract.patch import load_patch_manifest
    from astra_sglang.patches import install, status
    from astra_sglang.patches.registry import discover
    from astra_sglang.patches.tooling.devcheck import extracted_original

    front = _front_leaving_rewrite(root, tmp_path)
    folder = root / "merge_state" / "merge-state-mr-k1"
    assert load_patch_manifest(folder).guard_in_front["rt-merge"] == front  # written and read back
    original = extracted_original(discover()[0])
    monkeypatch.setattr(install, "resolve_target", lambda target: original)

    def serve(selected: str) -> Any:
        monkeypatch.setenv("ASTRA_SGLANG_PATCHES", selected)
        status.reset()
        hooked: dict[str, Any] = {}
        install.install_selected(lambda target, orig, hook: hooked.__setitem__(target, hook))
        (hook,) = hooked.values()
        args = _args(torch, REWRITE)
        out, _ = hook(*args)
        assert torch.allclose(out.float(), original(*args)[0].float(), atol=2e-2, rtol=2e-2)
        return status.statuses()

    stacked = serve("rt-merge,merge-state-mr-k1")
    assert (stacked["merge-state-mr-k1"].served_by_patch, stacked["merge-state-mr-k1"].passed_on) == (0, 1)
    assert stacked["rt-merge"].served_by_patch + stacked["rt-merge"].served_by_original == 1
    alone = serve("merge-state-mr-k1")
    assert (alone["merge-state-mr-k1"].served_by_patch, alone["merge-state-mr-k1"].passed_on) == (1, 0)


def test_in_front_of_a_retune_that_stands_aside_a_rewrite_serves_its_own_guard(
        root, tmp_path, monkeypatch, interpreted_merge_state):
    """The guard in front holds only while the retune behind it serves. On an H200 with `all`, the H100-measured
    decode-attention retune stands aside at its first call, and the rewrite in front had left it every LLaMA batch
    above 1: SGLang's original served them, where the rewrite alone measured 1.58x at B 128 (2026-12-07). Once the retune is
    out, the rewrite's own guard (where it beat that original) must decide."""
    torch = interpreted_merge_state
    from astra_sglang.contract.patch import load_patch_manifest, write_patch_manifest

    _front_leaving_rewrite(root, tmp_path)
    retune = root / "merge_state" / "rt-merge"
    r = load_patch_manifest(retune)
    r.validated_on.archs = ["sm_90"]  # measured on another device: it stands aside here, as on a GPU it never saw
    box = {k: v.model_copy(update={"min": REWRITE[k], "max": REWRITE[k]}) for k, v in r.guard.dims.items()}
    r.guard.regions.append(box)  # its guard takes the rewrite's shape, as the retune's B 1..256 takes LLaMA's B 128
    assert r.guard.accepts_dims(REWRITE)
    write_patch_manifest(retune, r)
    s = _serve_rewrite_shape_thrice(torch, monkeypatch)
    assert s["rt-merge"].state == "inapplicable", s["rt-merge"].reason
    # the first call went to the retune (still pending), which stood aside; from then on the rewrite serves
    assert (s["merge-state-mr-k1"].served_by_patch, s["merge-state-mr-k1"].passed_on) == (2, 1)


@pytest.mark.parametrize("gpu, served", [("NVIDIA H100 80GB HBM3", 3), ("NVIDIA H200", 0)])
def test_a_patch_measured_on_two_gpus_serves_on_each_only_where_it_won_there(
        root, tmp_path, monkeypatch, interpreted_merge_state, gpu, served):
    """A guard with boxes per GPU model (`patches guard` from records on the H100 and the H200): until its first
    call names the GPU, the union decides (so that call reaches the check); from then on only this GPU's boxes. The
    shape here won on the H100 only: the H200 hands every call of it to SGLang's kernel, after the same check."""
    torch = interpreted_merge_state
    from types import SimpleNamespace

    from astra_sglang.contract.patch import DimRange, load_patch_manifest, write_patch_manifest
    from astra_sglang.patches import runtime
    from astra_sglang.platform_info import CPU_INTERPRET_ARCH

    monkeypatch.setenv("ASTRA_SGLANG_PATCHES", "merge-state-mr-k1")
    _both(root, tmp_path)
    d = root / "merge_state" / "merge-state-mr-k1"
    m = load_patch_manifest(d)
    here = {k: DimRange(min=v, max=v) for k, v in REWRITE.items()}
    elsewhere = {k: DimRange(min=v, max=v) for k, v in NEITHER.items()}
    m.guard.regions = [here, elsewhere]
    m.guard.gpu_regions = {"NVIDIA H100 80GB HBM3": [here], "NVIDIA H200": [elsewhere]}
    write_patch_manifest(d, m)
    assert load_patch_manifest(d).guard.gpu_regions == m.guard.gpu_regions  # written and read back
    monkeypatch.setattr(runtime, "of_device", lambda device: SimpleNamespace(arch=CPU_INTERPRET_ARCH, gpu=gpu,
                                                                              build_target=None))
    s = _serve_rewrite_shape_thrice(torch, monkeypatch)["merge-state-mr-k1"]
    assert s.state == "active", s.reason  # checked on either GPU: the check covers the union
    assert (s.served_by_patch, s.served_by_original) == (served, 3 - served)


def _serve_rewrite_shape_thrice(torch: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Install the selected patches on merge_state's real original, call the stand-in three times at REWRITE
    (each result checked against the original), and return the patch states."""
    from astra_sglang.patches import install, status
    from astra_sglang.patches.registry import discover
    from astra_sglang.patches.tooling.devcheck import extracted_original

    original = extracted_original(discover()[0])
    monkeypatch.setattr(install, "resolve_target", lambda target: original)
    status.reset()
    hooked: dict[str, Any] = {}
    install.install_selected(lambda target, orig, hook: hooked.__setitem__(target, hook))
    (hook,) = hooked.values()
    for _ in range(3):
        args = _args(torch, REWRITE)
        out, _ = hook(*args)
        assert torch.allclose(out.float(), original(*args)[0].float(), atol=2e-2, rtol=2e-2)
    return status.statuses()
