"""Tunable candidates (TUNE/CONFIG) and `astra-sglang tune OP` on CPU (TRITON_INTERPRET=1, shapes=test).

CPU timing means nothing (host timers): these tests pin what must hold anyway: a wrong config is never chosen,
the choice is frozen into the saved source, that source imports, dispatches and passes a full evaluation, and
bad input is one line with exit 2.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from astra_sglang.cli.main import main
from astra_sglang.contract.eval_config import EvalConfig
from astra_sglang.contract.op import load_manifest
from astra_sglang.contract.result import TuneValue
from astra_sglang.harness import evaluate, evaluate_many
from astra_sglang.harness.parent.launch_params import find_launch_params, launch_variant
from astra_sglang.harness.parent.tune_space import MAX_CONFIGS, TuneError, find_space, freeze, variant_source
from astra_sglang.loader.pyimport import load_triton_wrapper

REPO = Path(__file__).resolve().parent.parent
MS = REPO / "tests" / "candidates" / "merge_state"
SIM = EvalConfig(shapes="test", dtypes=["bfloat16"], device="cpu", timeout_s=90, seed=77, simulate_timing=True,
                 warmup=1, rep=4, max_graph_launches=3, distributions=["normal"])
CHECK_ONLY = SIM.model_copy(update={"simulate_timing": False, "timing": False})

SMALL = '''import triton

TUNE = {"ROWS": [1, 2], "num_warps": [2, 4]}
CONFIG = {
    "ROWS": 1,
    "num_warps": 4,
}


def f():
    return CONFIG["ROWS"]
'''


@pytest.fixture(scope="module")
def merge_op(restored_op):
    return restored_op("merge_state")


# ------------------------------------------------------------------------------------ the declared space


def test_the_space_is_read_from_the_source_and_each_variant_is_one_literal_config():
    space = find_space(SMALL)
    assert space is not None and space.params == {"ROWS": [1, 2], "num_warps": [2, 4]}
    assert space.configs() == [{"ROWS": 1, "num_warps": 2}, {"ROWS": 1, "num_warps": 4},
                               {"ROWS": 2, "num_warps": 2}, {"ROWS": 2, "num_warps": 4}]
    v = variant_source(SMALL, space, {"ROWS": 2, "num_warps": 8}, "config 4/4")
    assert "CONFIG = {'ROWS': 2, 'num_warps': 8}" in v and "TUNE = " not in v
    assert v.splitlines()[-1] == SMALL.splitlines()[-1] and len(v.splitlines()) == len(SMALL.splitlines())
    assert find_space("import triton\nCONFIG = {}\n") is None


@pytest.mark.parametrize("text, says", [
    ('TUNE = [1, 2]\nCONFIG = {}\n', "dict literal of lists"),
    ('TUNE = {"ROWS": 4}\nCONFIG = {"ROWS": 4}\n', "non-empty list"),
    ('TUNE = {"ROWS": [1, x]}\nCONFIG = {"ROWS": 1}\n', "literal"),
    ('TUNE = {"ROWS": [1, 2]}\n', "must assign CONFIG"),
    ('TUNE = {"ROWS": [1, 2]}\nCONFIG = {"R": 1}\n', "keys"),
    ('TUNE = {"ROWS": [1, 2]}\nCONFIG = {"ROWS": 1}\ny = TUNE["ROWS"]\n', "reads TUNE"),
    ('TUNE = {"A": list(range(9))}\nCONFIG = {"A": 0}\n', "non-empty list of values"),
    ('TUNE = {"A": [1, 2, 3, 4, 5, 6, 7, 8, 9], "B": [1, 2, 3, 4, 5, 6, 7, 8]}\nCONFIG = {"A": 1, "B": 1}\n',
     f"cap of {MAX_CONFIGS}"),
])
def test_a_malformed_space_is_one_error_naming_the_rule(text, says):
    with pytest.raises(TuneError, match=says):
        find_space(text)


# ------------------------------------------------------------------- the sweep through the real harness


@pytest.fixture(scope="module")
def swept(merge_op, tmp_path_factory):
    cand = tmp_path_factory.mktemp("tunable") / "candidate.py"
    shutil.copy(MS / "tunable" / "one_wrong_config.py", cand)
    return cand, evaluate(merge_op, cand, SIM)


def test_a_wrong_config_is_dropped_by_the_quick_check_and_never_chosen(swept):
    cand, r = swept
    s = r.sweep
    assert s is not None and len(s.configs) == 6
    wrong = [c for c in s.configs if c.config["ROWS"] == 4]
    assert wrong and all(not c.ok and "unwritten output" in (c.failure or "") and not c.shapes for c in wrong)
    assert all(c.ok and c.shapes for c in s.configs if c.config["ROWS"] != 4)
    assert s.choice and all(ch.config["ROWS"] != 4 for ch in s.choice)
    assert "arbitrary among the configs that passed" in s.note  # CPU: said, not hidden
    assert "ABBA" in s.method and "one worker" in s.method


def test_the_choice_is_frozen_into_the_saved_source_which_passed_the_full_evaluation(swept, merge_op, monkeypatch):
    cand, r = swept
    s = r.sweep
    assert r.ok and r.timing is not None, r.error  # the full evaluation (all test shapes) of the frozen source
    assert r.candidate == str(cand) and s is not None and s.frozen_path is not None
    frozen = Path(s.frozen_path)
    assert frozen == cand.with_name("candidate.tuned.py") and frozen.read_text() == s.frozen_source
    text = frozen.read_text()
    assert "TUNE = {" not in text and "\nTUNED = [" in text and "TUNE frozen by astra-sglang tune" in text
    chosen = s.choice[0].config
    assert f"CONFIG = {{'ROWS': {chosen['ROWS']}, 'num_warps': {chosen['num_warps']}}}" in text
    assert find_space(text) is None  # nothing left to tune at serving time
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    fn = load_triton_wrapper(frozen, "merge_state_triton")
    a, b = torch.randn(5, 5, 8), torch.randn(5, 5, 8)
    la, lb = torch.randn(5, 5), torch.randn(5, 5)
    out, lse = fn(a, la, b, lb)
    m = torch.maximum(la, lb)
    wa, wb = torch.exp(la - m), torch.exp(lb - m)
    want = (a * wa[..., None] + b * wb[..., None]) / (wa + wb)[..., None]
    assert torch.allclose(out, want, atol=1e-5) and torch.allclose(lse, m + torch.log(wa + wb), atol=1e-5)


def test_a_dispatch_table_picks_the_nearest_bucket_and_its_source_passes_a_full_evaluation(merge_op, tmp_path,
                                                                                           monkeypatch):
    text = (MS / "tunable" / "one_wrong_config.py").read_text()
    space = find_space(text)
    assert space is not None
    table = [({"T": 1, "NH": 1, "D": 1}, {"ROWS": 1, "num_warps": 2}),
             ({"T": 5, "NH": 5, "D": 5}, {"ROWS": 2, "num_warps": 4})]
    frozen = freeze(text, space, table, load_manifest(merge_op))
    assert "def merge_state_triton(*args, **kwargs):" in frozen and "CONFIG.update(_astra_config(args, kwargs))" in frozen
    path = tmp_path / "dispatch.py"
    path.write_text(frozen)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    module_fn = load_triton_wrapper(path, "merge_state_triton")
    cfg = module_fn.__globals__["CONFIG"]
    args = [torch.randn(6, 4, 8), torch.randn(6, 4), torch.randn(6, 4, 8), torch.randn(6, 4)]
    module_fn(*args)
    assert cfg == {"ROWS": 2, "num_warps": 4}  # 6x4x8 is nearer 5x5x5 than 1x1x1
    module_fn(torch.randn(1, 1, 1), torch.randn(1, 1), torch.randn(1, 1, 1), torch.randn(1, 1))
    assert cfg == {"ROWS": 1, "num_warps": 2}
    r = evaluate(merge_op, path, CHECK_ONLY)  # no TUNE left: the normal path, every test shape and case
    assert r.ok and r.sweep is None, r.error


def test_a_malformed_tune_in_the_loop_is_that_candidate_s_build_failure(merge_op, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text((MS / "hand_written.py").read_text() + '\nTUNE = {"ROWS": 8}\nCONFIG = {"ROWS": 8}\n')
    good = MS / "hand_written.py"
    r_bad, r_good = evaluate_many(merge_op, [bad, good], CHECK_ONLY)
    assert not r_bad.build.ok and r_bad.error is not None and "non-empty list" in r_bad.error
    assert r_good.ok and r_good.sweep is None


def test_a_finished_sweep_is_kept_beside_the_candidate_and_reused_only_for_the_same_text_and_settings(
        swept, merge_op, monkeypatch):
    """A queue pass cut short after a candidate's sweep (2026-12-04: two 16-config decode_attention sweeps ate a
    540 s H200 pass, no verdict written) must not pay for that sweep again."""
    import astra_sglang.harness.parent.sweep as sweep

    cand, first = swept
    assert first.sweep is not None and cand.with_name("candidate.sweep.json").is_file()
    calls: list[int] = []

    class SweptAgain(Exception):
        """Where a sweep would run again: the test needs to know it starts, not to wait for it."""

    def record(*a, **k):
        calls.append(1)
        raise SweptAgain

    monkeypatch.setattr(sweep, "sweep_variants", record)
    Path(first.sweep.frozen_path).unlink()  # the frozen source lost: rewritten from the kept sweep
    again = evaluate(merge_op, cand, SIM)
    assert calls == [] and again.ok, again.error
    assert again.sweep is not None and again.sweep.choice == first.sweep.choice
    assert Path(again.sweep.frozen_path).read_text() == first.sweep.frozen_source
    with pytest.raises(SweptAgain):
        evaluate(merge_op, cand, SIM.model_copy(update={"mode": "warm"}))  # other settings: swept again
    assert calls == [1]
    edited = cand.with_name("edited.py")
    edited.write_text(cand.read_text() + "\n# edited\n")
    shutil.copy(cand.with_name("candidate.sweep.json"), edited.with_name("edited.sweep.json"))
    with pytest.raises(SweptAgain):
        evaluate(merge_op, edited, SIM)  # another text under a copied record: swept again
    assert calls == [1, 1]


def test_each_tunable_candidate_gets_its_verdict_before_the_next_one_is_swept(merge_op, tmp_path, monkeypatch):
    """So a pass cut short keeps every verdict it reached instead of none (the sweeps used to run first, all)."""
    import astra_sglang.harness.parent.sweep as sweep
    from astra_sglang.contract.result import SweepReport

    events: list[str] = []

    def fake_tune(op_dir, manifest, candidate, space, config, device, seed):
        events.append(f"sweep {candidate.name}")
        return SweepReport(parameters=space.params, configs=[], choice=[], single=False)

    monkeypatch.setattr(sweep, "tune_candidate", fake_tune)
    cands = []
    for name in ("a.py", "b.py"):
        cands.append(tmp_path / name)
        shutil.copy(MS / "tunable" / "rows_x_warps.py", cands[-1])
    evaluate_many(merge_op, cands, CHECK_ONLY, on_result=lambda i, r: events.append(f"verdict {i}"))
    assert events == ["sweep a.py", "verdict 0", "sweep b.py", "verdict 1"]


# ------------------------------------------------------------------------------------ tune OP, bad input


def test_the_original_s_launch_parameters_are_found_and_changed_by_ast(restored_op):
    src = restored_op("softcap_inplace_logits") / "src" / "kernels" / "ops" / "activation" / "softcap.py"
    params = find_launch_params(src.read_text(), ["softcap_inplace_logits_kernel"])
    by = {p.name: p for p in params}
    assert set(by) == {"softcap_inplace_logits_kernel.num_warps", "softcap_inplace_logits_kernel.BLOCK_SIZE"}
    assert by["softcap_inplace_logits_kernel.BLOCK_SIZE"].values == [256, 512, 1024, 2048, 4096]
    v = launch_variant(src.read_text(), params, {"softcap_inplace_logits_kernel.num_warps": 8,
                                                 "softcap_inplace_logits_kernel.BLOCK_SIZE": 256})
    assert "BLOCK_SIZE = 256" in v and "num_warps=8" in v
    assert v.count("BLOCK_SIZE = 1024") == 1  # the other kernel's wrapper is left alone
    with pytest.raises(TuneError, match="nothing to sweep"):
        find_launch_params("import triton\n\ndef f(x):\n    return x\n", ["k"])


def _one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str], says: str) -> None:
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and says in err, err


def test_bad_input_is_one_line_and_exit_2(merge_op, restored_op, tmp_path, capsys):
    _one_line_exit_2(["tune", str(restored_op("fused_add_rmsnorm")), "--device", "cpu"], capsys,
                     "exposes no launch or template parameters")
    for name, tail, says in (("not_dict.py", 'TUNE = [1, 2]\nCONFIG = {}\n', "dict literal of lists"),
                             ("over_cap.py", 'TUNE = {"A": [' + ", ".join(map(str, range(65))) + ']}\n'
                              'CONFIG = {"A": 0}\n', f"cap of {MAX_CONFIGS}")):
        cand = tmp_path / name
        cand.write_text((MS / "hand_written.py").read_text() + "\n" + tail)
        _one_line_exit_2(["bench", str(merge_op), "--candidate", str(cand), "--device", "cpu", "--shapes", "test",
                          "--json"], capsys, says)


def test_an_untimed_sweep_quick_checks_a_sample_and_says_which_configs_the_gpu_checks(merge_op, tmp_path):
    """On the CPU interpreter a sweep cannot time; checking every config there cost a coding agent its check's
    180 s (decode attention, 18 configs) and made it cut the TUNE space the GPU would have swept."""
    from astra_sglang.harness.parent.sweep import UNTIMED_SWEEP_CONFIGS, untimed_sample

    assert untimed_sample(18, 4) == [0, 6, 11, 17] and untimed_sample(3, 4) == [0, 1, 2]
    cand = tmp_path / "candidate.py"
    shutil.copy(MS / "tunable" / "one_wrong_config.py", cand)
    r = evaluate(merge_op, cand, CHECK_ONLY)
    s = r.sweep
    assert r.ok and s is not None and len(s.configs) == 6
    unchecked = [c for c in s.configs if "not checked here" in (c.failure or "")]
    assert len(unchecked) == 6 - UNTIMED_SWEEP_CONFIGS and "the GPU sweep checks every config" in unchecked[0].failure
    checked = [c for c in s.configs if c not in unchecked]
    assert any(not c.ok and "unwritten output" in (c.failure or "") for c in checked)   # ROWS 4, index 5
    assert s.frozen_path is not None and all(c.ok for c in checked if c.config["ROWS"] != 4)


def test_an_interpreter_check_leaves_huge_extra_cases_to_the_gpu_and_says_so(merge_op):
    """A Testing agent's decode-attention suite held 8M-element cases; under the interpreter one took minutes and
    timed out a coding agent's check. The GPU evaluation still runs them (shapes other than 'test')."""
    from astra_sglang.contract.eval_config import ExtraCase
    from astra_sglang.harness.shared.suite import build_suite
    from astra_sglang.loop.evaluator import check_from_result

    m = load_manifest(merge_op)
    dims = {d.name: 1 for d in m.signature.dims}
    big = {**dims, **{d.name: 1 << 12 for d in m.signature.dims[:2]}}
    cfg = CHECK_ONLY.model_copy(update={"extra_cases": [ExtraCase(dims=dims, dtype="bfloat16"),
                                                        ExtraCase(dims=big, dtype="bfloat16")],
                                        "interpreter_max_elems": 1 << 20})
    extras = [c for c in build_suite(m, cfg, 1, None) if "extra" in c.tags]
    assert [c.dims for c in extras] == [dims]
    gpu = cfg.model_copy(update={"shapes": "paper"})
    assert len([c for c in build_suite(m, gpu, 1, None) if "extra" in c.tags]) == 2
    r = evaluate(merge_op, None, cfg)
    assert r.ok and any("1 of the suite's 2 extra case(s) not run here" in n for n in r.correctness.notes)
    assert "run when the candidate is evaluated on the GPU" in check_from_result(r).ran


def test_a_sweep_from_a_prior_times_only_each_prior_shapes_fastest_configs_and_is_never_a_runs_bar(
        merge_op, tmp_path, capsys):
    """After a contract revision that moved the shapes a little (decode attention, 2026-12-06: S 1024 -> 1033, q in
    the qkv rows), `tune --prior` re-times the configs that ranked among each prior shape's top K, not all 64 (9 of
    64 for decode attention's H100 sweep at K 3). The prior here is SCRIPTED; timing is the CPU simulation."""
    from astra_sglang.contract.result import SweepBaseline, SweepConfig, SweepShape
    from astra_sglang.harness.parent.tune_baseline import prior_configs, sweep_baseline
    from astra_sglang.loop.evaluator import _same_sweep
    from astra_sglang.loop.records import EvalSpec

    w = "merge_state_kernel.num_warps"

    def at(us_a: float, us_b: float) -> list[SweepShape]:
        return [SweepShape(dims={"T": 5, "NH": 8, "D": 128}, dtype="bfloat16", original_us=10.0, candidate_us=us_a,
                           speedup=10.0 / us_a, spread_pct=0.5),
                SweepShape(dims={"T": 512, "NH": 40, "D": 128}, dtype="bfloat16", original_us=10.0,
                           candidate_us=us_b, speedup=10.0 / us_b, spread_pct=0.5)]
    prior = SweepBaseline(op_id="attention.merge_state_triton", sglang_version="0.5.23", device="NVIDIA H200 (sm_90)",
                          parameters={w: [1, 2, 4, 8]}, original_config={w: "4"}, shapes=[], method="SCRIPTED",
                          configs=[SweepConfig(config={w: 1}, ok=True, shapes=at(7.0, 12.0)),
                                   SweepConfig(config={w: 2}, ok=True, shapes=at(8.0, 11.0)),
                                   SweepConfig(config={w: 4}, ok=True, shapes=at(9.0, 10.0)),
                                   SweepConfig(config={w: 8}, ok=False, shapes=[], failure="wrong")])
    space = [{w: v} for v in (1, 2, 4, 8)]
    assert prior_configs(prior, space, 1, "merge_state") == [{w: 1}, {w: 4}]  # each shape's fastest correct one
    assert prior_configs(prior, space, 2, "merge_state") == [{w: 1}, {w: 2}, {w: 4}]  # never the wrong one
    b = sweep_baseline(merge_op, SIM, prior=(prior, 1))
    assert [c.config for c in b.configs] == [{w: 1}, {w: 4}]
    assert b.configs_from.startswith("2 of the 4 configs") and "NVIDIA H200" in b.configs_from
    # written where a run would look for its bar, it is still not one: part of the space is a bar too low
    folder = tmp_path / "merge_state"
    shutil.copytree(merge_op, folder)
    (folder / "tune_baseline.json").write_text(b.model_copy(update={"device": "NVIDIA H200 (sm_90)",
                                                                    "method": "cold L2"}).model_dump_json())
    spec = EvalSpec(shapes="test", mode="cold")
    assert _same_sweep(folder, load_manifest(folder), spec) is None
    full = b.model_copy(update={"device": "NVIDIA H200 (sm_90)", "method": "cold L2", "configs_from": ""})
    (folder / "tune_baseline.json").write_text(full.model_dump_json())
    assert _same_sweep(folder, load_manifest(folder), spec) is not None  # the same file, the whole space
    # bad input: one line, exit 2
    bad = tmp_path / "other.json"
    bad.write_text(prior.model_copy(update={"configs": [SweepConfig(config={"k.BLOCK": 1}, ok=True)]}).model_dump_json())
    _one_line_exit_2(["tune", str(merge_op), "--prior", str(bad), "--device", "cpu"], capsys, "not the same space")
    _one_line_exit_2(["tune", str(merge_op), "--prior", str(tmp_path / "none.json")], capsys, "cannot read it")


# ------------------------------------------------- the original's sweep: a config refused at some shapes

REFUSES = '''    if CONFIG["ROWS"] == 2 and num_tokens >= 5:  # the GPU's shared-memory limit, as Triton raises it
        from triton.runtime.errors import OutOfResources
        raise OutOfResources(245760, 232448, "shared memory")
'''


def _variants(tmp_path: Path) -> tuple[list[dict[str, TuneValue]], list[Path]]:
    """Three configs of the tunable merge_state; ROWS 2 cannot launch at T >= 5 (a quick case and a timed shape)."""
    text = (MS / "tunable" / "rows_x_warps.py").read_text()
    space = find_space(text)
    assert space is not None
    configs: list[dict[str, TuneValue]] = [{"ROWS": 1, "num_warps": 2}, {"ROWS": 2, "num_warps": 2}, {"ROWS": 4, "num_warps": 2}]
    paths = []
    for i, c in enumerate(configs):
        v = variant_source(text, space, c, f"config {i + 1}/3")
        anchor = "    n_rows = num_tokens * num_heads\n"
        assert anchor in v
        paths.append(tmp_path / f"v{i}.py")
        paths[-1].write_text(v.replace(anchor, anchor + REFUSES))
    return configs, paths


def test_the_original_s_sweep_lets_a_config_the_gpu_refuses_somewhere_compete_where_it_runs(merge_op, tmp_path):
    """SGLang tunes per batch size among the configs that run there; the sweep baseline dropped a config at its
    first refusal, so 28 of 96 fused-MoE configs never competed at the Qwen3 decode shapes where 8 of them fit (H200,
    2026-12-06). The bar now has them where they launched; a candidate's sweep still drops them, and a retune
    never serves them."""
    from astra_sglang.contract.result import BaselineShape, SweepBaseline
    from astra_sglang.harness.parent.sweep import choose, sweep_variants
    from astra_sglang.patches.tooling.retune_add import bucket_rows

    configs, paths = _variants(tmp_path)
    m = load_manifest(merge_op)
    per_shape, dev, _ = sweep_variants(merge_op, m, configs, paths, SIM, "cpu", 5, refusals_per_shape=True)
    two = per_shape[1]
    assert two.ok and two.refused and all("'T': 5" in r and "OutOfResources" in r for r in two.refused), two
    assert {s.dims["T"] for s in two.shapes} == {1, 3}  # timed where it launched, nowhere else
    assert all(c.ok and not c.refused and {s.dims["T"] for s in c.shapes} == {1, 3, 5} for c in (per_shape[0], per_shape[2]))
    choices, _, _ = choose(per_shape, 0.0, collapse=False)
    assert sorted(c.dims["T"] for c in choices) == [1, 3, 5]
    at5 = next(c for c in choices if c.dims["T"] == 5)
    assert at5.config["ROWS"] != 2

    dropped, _, _ = sweep_variants(merge_op, m, configs, paths, SIM, "cpu", 5)  # a candidate's sweep
    assert not dropped[1].ok and "launch error" in (dropped[1].failure or "") and not dropped[1].shapes

    shapes = [BaselineShape(dims=c.dims, dtype="bfloat16", original_us=c.original_us, best_config=c.config,
                            best_us=c.candidate_us, speedup=c.speedup) for c in choices]
    base = SweepBaseline(op_id=m.op_id, sglang_version=m.sglang_version, device="NVIDIA H200 (sm_90)",
                         parameters={"ROWS": [1, 2, 4], "num_warps": [2]}, original_config={"ROWS": "1", "num_warps": "2"},
                         shapes=shapes, configs=per_shape, method="", note="", wall_s=0.0)
    for s in two.shapes:  # the fastest where it ran: still never served
        s.speedup = 9.0
    rows, _ = bucket_rows(base, {"T", "NH", "D"}, 0.0)
    assert rows and all(r.config["ROWS"] != 2 for r in rows)
