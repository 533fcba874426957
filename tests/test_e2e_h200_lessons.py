"""What e2e's first H200 run taught (4 rounds, LLaMA-3-8B dims, triton backend, bs 1/32/128, in 1024, out 64).

Fixture tests/h_fixtures/e2e_h200_triton/: that run's arm.json + result.jsonl files, unchanged (r004/C has results
but no arm.json: it was killed while exiting). Lessons: the first process on a machine is an outlier (cold
Triton/JIT caches: r001/A's bs 32 prefill 2028 ms against 779-791 ms), so a warm-up process runs first, outside the
statistics; a patch whose op this forward never calls (merge-state-mr-k1 on triton: 0 calls either way in every B
and C process) is not reached, not a problem; a placebo that moves the way B does says the hooks, not the kernel,
made the change; and a run cut by a time limit gets its report with --report-only. The runs use the labelled
stand-in forward (tests/standin/one_batch_standin.py), not SGLang.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from astra_sglang.cli.main import main

pytest.importorskip("numpy")

from astra_sglang.e2e.runner import (  # noqa: E402
    ArmRun,
    E2EConfig,
    PatchCount,
    build_report,
    load_done,
    problems,
)
from astra_sglang.e2e.stats import Interval, judge  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
H200 = REPO / "tests" / "h_fixtures" / "e2e_h200_triton"
STANDIN = REPO / "tests" / "standin" / "one_batch_standin.py"
UNREACHED = "merge-state-mr-k1"
REACHED = "fused-add-rmsnorm-mr-k4"


def _h200_folder(tmp_path: Path) -> Path:
    """A copy of the H200 run folder with its e2e.json (the measurement, from round 1's A command)."""
    out = tmp_path / "e2e"
    shutil.copytree(H200, out)
    cmd = json.loads((out / "r001" / "A" / "arm.json").read_text())["command"]
    cut = cmd.index("--result-filename")
    cfg = E2EConfig(forward=cmd[:2], one_batch_args=cmd[2:cut], rounds=5, max_rounds=5)
    (out / "e2e.json").write_text(cfg.model_dump_json(indent=1))
    return out


def _cfg(out: Path) -> E2EConfig:
    return E2EConfig.model_validate_json((out / "e2e.json").read_text())


def _standin(out: Path, *extra: str, rounds: int = 2) -> list[str]:
    return ["e2e", "--rounds", str(rounds), "--max-rounds", str(rounds), "--out", str(out), "--forward", str(STANDIN),
            "--batch-size", "1", "64", *extra, "--", "--model-path", "standin-model"]


# ---------------------------------------------------------------------------------- 1. the warm-up process

def test_a_warm_up_process_runs_arm_a_first_and_stays_out_of_the_statistics(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_standin(out, "--json")) == 0
    captured = capsys.readouterr()
    rep = json.loads(captured.out)
    assert rep["warmup_processes"] == 1
    assert "warm-up 1/1: arm A's command" in captured.err
    warm = json.loads((out / "r000" / "W1" / "arm.json").read_text())
    assert warm["round"] == 0 and warm["env"]["ASTRA_SGLANG_PATCHES"] == "off"
    assert warm["command"][:-1] == json.loads((out / "r001" / "A" / "arm.json").read_text())["command"][:-1]
    assert all(len(s["decode"]["samples"]["A"]) == 2 for s in rep["shapes"])    # rounds 1 and 2 only
    assert rep["rounds_done"] == 2


def test_warm_up_processes_can_be_more_or_none(tmp_path, capsys):
    assert main(_standin(tmp_path / "two", "--warmup-processes", "2")) == 0
    assert "warm-up processes: 2" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "two" / "r000").iterdir()) == ["W1", "W2"]
    assert main(_standin(tmp_path / "none", "--warmup-processes", "0", "--json")) == 0
    assert json.loads(capsys.readouterr().out)["warmup_processes"] == 0
    assert not (tmp_path / "none" / "r000").exists()


def test_the_h200s_cold_first_process_as_warm_up_leaves_the_statistics(tmp_path):
    out = _h200_folder(tmp_path)
    runs = list(load_done(out).values())
    cold = next(r for r in runs if (r.round, r.arm) == (1, "A"))
    assert [s.prefill_latency for s in cold.results if s.batch_size == 32][0] > 2.0   # 2028 ms: the outlier
    as_warmup = cold.model_copy(update={"round": 0, "position": 0})
    rep = build_report(_cfg(out), [as_warmup, *(r for r in runs if r is not cold)], out)
    assert rep.warmup_processes == 1
    bs32 = next(s for s in rep.shapes if s.batch_size == 32)
    assert len(bs32.prefill.samples["A"]) == 3 and max(bs32.prefill.samples["A"]) < 0.8
    assert bs32.prefill.b_over_a is not None and bs32.prefill.b_over_a.low > 0.9   # was [0.387, 1.012]


# ----------------------------------------------------------------------------- 2. a patch never reached

def test_a_patch_this_forward_never_reaches_is_listed_not_a_problem(tmp_path):
    out = _h200_folder(tmp_path)
    runs = list(load_done(out).values())
    assert problems(_cfg(out), runs) == []
    rep = build_report(_cfg(out), runs, out)
    assert rep.not_reached == [UNREACHED] and rep.problems == []
    assert not any("served no calls" in line for line in rep.reasons)
    assert any(line.startswith(f"not reached in this forward, so not counted: {UNREACHED}") for line in rep.reasons)


def test_a_reached_patch_that_served_nothing_in_b_stays_a_problem(tmp_path):
    out = _h200_folder(tmp_path)
    runs = list(load_done(out).values())
    b2 = next(r for r in runs if (r.round, r.arm) == (2, "B"))
    b2.patches = [PatchCount(patch_id=REACHED, state="failed", served_by_patch=0, served_by_original=4096,
                             reason="first-call check failed"),
                  PatchCount(patch_id=UNREACHED, state="pending")]
    assert problems(_cfg(out), runs) == [f"patch {REACHED} served no calls in round 2's B process "
                                         "(state failed: first-call check failed)"]


def test_no_expected_patch_reached_is_said(tmp_path):
    cfg = E2EConfig(forward=["f"], one_batch_args=["--model-path", "M"])
    runs = [ArmRun(round=1, arm=arm, position=i, command=["f"], env={}, seconds=1.0, results=[],
                   patches=[] if arm == "A" else [PatchCount(patch_id=UNREACHED, state="pending")])
            for i, arm in enumerate("ABC")]
    found = problems(cfg, runs)
    assert found[0] == "no expected patch was reached in this forward: B ran SGLang's own kernels only"


# ------------------------------------------------------------------ 3. the placebo moving the way B does

def _iv(lo: float, hi: float) -> Interval:
    return Interval(ratio=(lo + hi) / 2, low=lo, high=hi, n_num=4, n_den=4)


def test_slower_with_the_placebo_slower_too_blames_the_hooks_not_the_kernel():
    verdict, why = judge(_iv(1.12, 1.62), _iv(1.05, 1.30))
    assert verdict == "slower"
    assert "the hooks (installed in both B and C), not the patch's kernel, account for the change" in why[1]
    assert "C/A 1.175 [1.050, 1.300] lies above 1" in why[1]


def test_a_gain_with_the_placebo_faster_too_is_the_hooks_not_the_kernel():
    verdict, why = judge(_iv(0.88, 0.94), _iv(0.90, 0.96))
    assert verdict == "no measurable change"
    assert "the hooks (installed in both B and C), not the patch's kernel, account for the change" in why[1]
    assert "lies below 1, as B/A does" in why[1]


def test_a_placebo_moving_the_other_way_is_process_noise_not_the_hooks():
    for b, c in ((_iv(1.05, 1.10), _iv(0.90, 0.96)), (_iv(0.88, 0.94), _iv(1.02, 1.06))):
        why = " ".join(judge(b, c)[1])
        assert "the other way" in why and "hooks" not in why


# ---------------------------------------------------------------------------------------- --report-only

def test_report_only_reports_a_cut_run_without_running_anything(tmp_path, capsys):
    out = _h200_folder(tmp_path)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    assert main(["e2e", "--report-only", "--out", str(out), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["rounds_done"] == 3 and rep["warmup_processes"] == 0
    assert rep["stopped"].startswith("report only: 11 finished process(es)")
    bs1 = rep["shapes"][0]["decode"]["samples"]
    assert (len(bs1["A"]), len(bs1["B"]), len(bs1["C"])) == (4, 4, 3)        # r004/C: no arm.json, unfinished
    assert rep["not_reached"] == [UNREACHED] and rep["verdict"] == "slower"    # bs 1 prefill B/A lies above 1
    assert json.loads((out / "report.json").read_text())["rounds_done"] == 3
    new = {p.relative_to(out) for p in out.rglob("*")} - set(before)
    assert new <= {Path("report.json"), Path("e2e.png")}                       # nothing ran
    assert main(["e2e", "--report-only", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "verdict: slower" in text and "warm-up processes: 0" in text


@pytest.mark.parametrize("argv, message", [
    (["e2e", "--report-only"], "--report-only needs --out"),
    (["e2e", "--report-only", "--out", "/nonexistent/run"], "/nonexistent/run is not an e2e run folder (no e2e.json)"),
])
def test_report_only_bad_input_is_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err
