"""A retune patch: SGLang's own kernel under the launch configs its sweep found, with no kernel code of its own.

The sweeps here are SCRIPTED (numbers written by the test, named as an H200's so the GPU-only gate lets them in);
the kernels are real: merge_state's original, rebuilt from extracted/merge_state, run under TRITON_INTERPRET=1.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from astra_sglang.cli.main import main
from astra_sglang.contract.result import BaselineShape, SweepBaseline, SweepConfig, SweepShape

WARPS = "merge_state_kernel.num_warps"
BIG, SMALL = {"T": 512, "NH": 40, "D": 128}, {"T": 8, "NH": 5, "D": 128}  # two of the contract's shapes


def _scripted_sweep(device: str = "NVIDIA H200 (sm_90)", op_id: str = "attention.merge_state_triton") -> SweepBaseline:
    """8 warps win at T 512 (1.25x), 2 warps at T 8 (1.10x); each loses at the other's shape. SCRIPTED."""
    def at(dims: dict[str, int], speedup: float) -> SweepShape:
        return SweepShape(dims=dims, dtype="bfloat16", original_us=10.0, candidate_us=10.0 / speedup,
                          speedup=speedup, spread_pct=0.5)
    return SweepBaseline(
        op_id=op_id, sglang_version="0.5.23", device=device, parameters={WARPS: [2, 8]},
        original_config={WARPS: "4 (Triton's default)"}, method="SCRIPTED BY TEST, not a measurement",
        shapes=[BaselineShape(dims=BIG, dtype="bfloat16", original_us=10.0, best_config={WARPS: 8}, best_us=8.0,
                              speedup=1.25),
                BaselineShape(dims=SMALL, dtype="bfloat16", original_us=10.0, best_config={WARPS: 2},
                              best_us=10.0 / 1.1, speedup=1.1)],
        configs=[SweepConfig(config={WARPS: 2}, ok=True, shapes=[at(BIG, 0.9), at(SMALL, 1.1)]),
                 SweepConfig(config={WARPS: 8}, ok=True, shapes=[at(BIG, 1.25), at(SMALL, 0.95)])])


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES_DIR", str(tmp_path / "patches"))
    monkeypatch.setenv("ASTRA_SGLANG_STATE_FILE", str(tmp_path / "state.json"))
    return tmp_path / "patches"


def _write(tmp_path: Path, sweep: SweepBaseline) -> Path:
    path = tmp_path / "tune_baseline.json"
    path.write_text(sweep.model_dump_json())
    return path


def test_a_retune_patch_serves_sglangs_own_kernel_with_the_config_of_the_calls_bucket(
        root, tmp_path, monkeypatch, interpreted_merge_state):
    torch = interpreted_merge_state
    from astra_sglang.contract.patch import load_patch_manifest, write_patch_manifest
    from astra_sglang.loader.pyimport import load_function
    from astra_sglang.patches import counters, status
    from astra_sglang.patches.kernels import extracted_op_dir
    from astra_sglang.patches.registry import discover, load_op
    from astra_sglang.patches.retune import kernel_file
    from astra_sglang.patches.runtime import PatchRuntime
    from astra_sglang.patches.tooling.devcheck import extracted_original

    assert main(["patches", "add-retune", "merge_state", "--sweep", str(_write(tmp_path, _scripted_sweep())),
                 "--id", "rt-merge"]) == 0
    d = root / "merge_state" / "rt-merge"
    assert sorted(p.name for p in d.iterdir()) == ["manifest.json", "retune.json"]  # no kernel code kept
    recipe = json.loads((d / "retune.json").read_text())
    assert [(r["dims"], r["config"]) for r in recipe["rows"]] == [(BIG, {WARPS: 8}), (SMALL, {WARPS: 2})]
    m = load_patch_manifest(d)
    assert m.source.retune and m.guard.regions  # both shapes won with their bucket's config: both served
    assert m.validated_on.archs == ["sm_90"] and m.validated_on.gpus == ["NVIDIA H200"]  # the sweep's GPU
    assert m.check_shapes and all(m.guard.accepts_dims(c) for c in m.check_shapes)
    m.check_shapes = [SMALL]  # one: the interpreter is slow
    m.validated_on.archs.append("cpu-interpret")  # this host: the interpreter stands in for the GPU
    write_patch_manifest(d, m)
    entry = discover()[0]
    original = extracted_original(entry)
    status.reset("rt-merge")
    hook = PatchRuntime(entry.path, entry.manifest).hook_for(original, m.targets[0])
    args = [torch.randn(8, 5, 128).bfloat16(), torch.randn(8, 5), torch.randn(8, 5, 128).bfloat16(), torch.randn(8, 5)]
    out, lse = hook(*args)  # inside the guard: the derived regions are the two measured shapes
    assert status.statuses()["rt-merge"].state == "active", status.statuses()["rt-merge"]
    assert counters()["rt-merge"] == {"patch": 1, "original": 0}
    ref_out, ref_lse = original(*args)
    assert torch.allclose(out.float(), ref_out.float(), atol=2e-2, rtol=2e-2) and torch.allclose(lse, ref_lse)
    # the text it runs: SGLang's source with the launch reading the per-call dict, set by the nearest bucket
    op_dir = extracted_op_dir(m)
    path = kernel_file(d, m, op_dir, load_op(m))
    text = path.read_text()
    assert "num_warps=_ASTRA_LAUNCH['merge_state_kernel.num_warps']" in text
    fn = load_function(path, "merge_state_triton")
    fn(*args)
    assert fn.__globals__["_ASTRA_LAUNCH"] == {WARPS: 2}  # the T 8 bucket
    big = [torch.randn(64, 40, 128).bfloat16(), torch.randn(64, 40), torch.randn(64, 40, 128).bfloat16(),
           torch.randn(64, 40)]
    fn(*big)
    assert fn.__globals__["_ASTRA_LAUNCH"] == {WARPS: 8}


def test_a_retune_refuses_a_sglang_whose_launch_no_longer_matches_its_sweep(root, tmp_path, restored_op):
    """A stale table must not run: the installed SGLang exposes other launch parameters than the recipe sets."""
    restored_op("merge_state")
    from astra_sglang.contract.patch import RetuneRecipe, RetuneRow, load_patch_manifest
    from astra_sglang.errors import AstraError
    from astra_sglang.patches.kernels import extracted_op_dir
    from astra_sglang.patches.registry import load_op
    from astra_sglang.patches.retune import kernel_file

    assert main(["patches", "add-retune", "merge_state", "--sweep", str(_write(tmp_path, _scripted_sweep())),
                 "--id", "rt-stale"]) == 0
    d = root / "merge_state" / "rt-stale"
    m = load_patch_manifest(d)
    stale = RetuneRecipe(op_id="attention.merge_state_triton", sglang_version="0.5.23", swept_on="NVIDIA H200 (sm_90)",
                         parameters={WARPS: [2, 8], "merge_state_kernel.BLOCK_H": [16, 32]},
                         rows=[RetuneRow(dims=BIG, config={WARPS: 8, "merge_state_kernel.BLOCK_H": 16}, shapes=[BIG],
                                         geomean_speedup=1.2)])
    (d / "retune.json").write_text(stale.model_dump_json())
    with pytest.raises(AstraError, match="its launch changed since the sweep"):
        kernel_file(d, m, extracted_op_dir(m), load_op(m))


@pytest.mark.parametrize("sweep, says", [
    (_scripted_sweep(device="cpu (TRITON_INTERPRET=1)"), "not timed on a GPU"),
    (_scripted_sweep(op_id="attention.decode_attention_fwd"), "not of attention.merge_state_triton"),
])
def test_add_retune_refuses_a_sweep_that_says_nothing_about_this_op_s_speed(root, tmp_path, restored_op, capsys,
                                                                            sweep, says):
    restored_op("merge_state")
    assert main(["patches", "add-retune", "merge_state", "--sweep", str(_write(tmp_path, sweep)), "--id", "x"]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and not (root / "merge_state" / "x").exists()


def test_a_sweep_of_shapes_the_contract_no_longer_states_is_refused_naming_the_re_sweep(root, tmp_path, restored_op,
                                                                                       capsys):
    """A guard derived from shapes SGLang's contract no longer states (decode attention's old sweep at S 1024 with
    a contiguous q, after the revision to S 1033 with q in the qkv rows) would serve calls nothing measured."""
    restored_op("merge_state")
    old = _scripted_sweep()
    moved = {"T": 5, "NH": 8, "D": 128}  # not a merge_state contract shape
    old.shapes[1] = old.shapes[1].model_copy(update={"dims": moved})
    for c in old.configs:
        c.shapes[1] = c.shapes[1].model_copy(update={"dims": moved})
    rc = main(["patches", "add-retune", "merge_state", "--sweep", str(_write(tmp_path, old)), "--id", "rt-old"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "1 of its 2 shapes are not the merge_state contract's" in err and "--prior" in err
    assert not (root / "merge_state" / "rt-old").exists()


def _scripted_moe_sweep() -> SweepBaseline:
    """fused_moe_kernel (w1) at two of its contract's timed shapes: BLOCK_SIZE_N 128 wins at both. SCRIPTED."""
    from astra_sglang.contract.op import load_manifest
    from astra_sglang.patches.registry import op_folder

    m = load_manifest(op_folder("fused_moe_kernel"))
    dims = [s.dims for s in m.shapes if "paper" in s.tags][:2]
    assert len(dims) == 2, "the contract's timed set"
    bn, keys = "config.BLOCK_SIZE_N", ("config.BLOCK_SIZE_K", "config.num_warps", "config.num_stages")
    fixed = dict(zip(keys, (128, 4, 3)))

    def at(d: dict[str, int], speedup: float) -> SweepShape:
        return SweepShape(dims=d, dtype="bfloat16", original_us=100.0, candidate_us=100.0 / speedup,
                          speedup=speedup, spread_pct=0.5)
    return SweepBaseline(
        op_id=m.op_id, sglang_version="0.5.23", device="NVIDIA H200 (sm_90)",
        parameters={bn: [64, 128], **{k: [v] for k, v in fixed.items()}},
        original_config={bn: "SGLang's tuned JSON"}, method="SCRIPTED BY TEST, not a measurement",
        shapes=[BaselineShape(dims=d, dtype="bfloat16", original_us=100.0, best_config={bn: 128, **fixed},
                              best_us=90.0, speedup=100 / 90) for d in dims],
        configs=[SweepConfig(config={bn: 64, **fixed}, ok=True, shapes=[at(d, 0.97) for d in dims]),
                 SweepConfig(config={bn: 128, **fixed}, ok=True, shapes=[at(d, 100 / 90) for d in dims])])


def test_a_retune_of_fused_moe_registers_on_a_host_whose_sglang_cannot_import_its_kernel_module(
        root, tmp_path, restored_op):
    """SGLang's fused-MoE kernel module imports srt utilities whose installed chain needs torchvision (absent here,
    and in many serving images): add-retune imports the retuned text among the op folder's vendored modules, as a
    server's patch loader does, not as a bare file (which refused the H200 sweep's retune, 2026-12-06)."""
    restored_op("fused_moe_kernel")
    from astra_sglang.contract.patch import load_patch_manifest

    assert main(["patches", "add-retune", "fused_moe_kernel", "--sweep",
                 str(_write(tmp_path, _scripted_moe_sweep())), "--id", "rt-moe", "--not-in-all"]) == 0
    m = load_patch_manifest(root / "fused_moe_kernel" / "rt-moe")
    assert m.source.retune and m.guard.regions and not m.in_all


def test_a_retune_that_does_not_import_leaves_no_patch_folder(root, tmp_path, restored_op, monkeypatch, capsys):
    """A refused import must not leave a half-registered patch (a retune.json without a manifest) whose id then
    blocks the corrected add."""
    restored_op("merge_state")
    from astra_sglang.errors import AstraError
    from astra_sglang.patches.tooling import retune_add

    def refuse(*_: object) -> None:
        raise AstraError("add-x.py does not import: ModuleNotFoundError: No module named 'torchvision'")

    monkeypatch.setattr(retune_add, "_import_triton", refuse)
    sweep = str(_write(tmp_path, _scripted_sweep()))
    assert main(["patches", "add-retune", "merge_state", "--sweep", sweep, "--id", "rt-x"]) == 2
    assert "does not import" in capsys.readouterr().err
    assert not (root / "merge_state" / "rt-x").exists()
    monkeypatch.undo()
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES_DIR", str(root))
    assert main(["patches", "add-retune", "merge_state", "--sweep", sweep, "--id", "rt-x"]) == 0


def test_two_add_retunes_of_one_id_never_delete_each_others_import_probe(root, tmp_path, restored_op):
    """Each `add-retune` imports its retuned source from a file in the user cache before registering. The file was
    named by the patch id alone, so a second process adding the same id (parallel tests) had it deleted under it
    mid-import: "add-rt-merge.py does not import: ... does not exist" (2026-12-07). The other process's file, here
    a stand-in at the old name, must survive this one's add."""
    restored_op("merge_state")
    from astra_sglang.data_paths import user_cache

    other = user_cache() / "retuned" / "add-rt-probe.py"
    other.parent.mkdir(parents=True, exist_ok=True)
    other.write_text("# another process's probe, mid-import\n")
    try:
        assert main(["patches", "add-retune", "merge_state", "--sweep", str(_write(tmp_path, _scripted_sweep())),
                     "--id", "rt-probe"]) == 0
        assert other.read_text() == "# another process's probe, mid-import\n"
    finally:
        other.unlink(missing_ok=True)
    assert not list(other.parent.glob("add-rt-probe-*.py"))  # its own probe is gone
