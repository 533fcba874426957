"""``astra-sglang e2e`` end to end on CPU, with a STAND-IN forward (tests/standin/one_batch_standin.py, not SGLang):
fresh processes per arm per round, the rotated order, the arms' environments, the results and status records read
back, the verdict, the run folder resumed after a crash, and one-line errors for bad input."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from astra_sglang.cli.main import main

pytest.importorskip("numpy")

REPO = Path(__file__).resolve().parents[1]
STANDIN = REPO / "tests" / "standin" / "one_batch_standin.py"


def _e2e(out: Path, *extra: str, rounds: int = 3) -> list[str]:
    return ["e2e", "--rounds", str(rounds), "--max-rounds", str(rounds), "--out", str(out), "--forward", str(STANDIN),
            "--batch-size", "1", "64", "--json", *extra, "--", "--model-path", "standin-model", "--load-format", "dummy"]


def _report(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def _arm(out: Path, rnd: int, arm: str) -> dict:
    return json.loads((out / f"r{rnd:03d}" / arm / "arm.json").read_text())


def test_ten_percent_faster_patch_with_placebo_holding_is_a_gain(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("STANDIN_B_FACTOR", "0.9")
    out = tmp_path / "run"
    assert main(_e2e(out, rounds=4)) == 0
    rep = _report(capsys)
    assert rep["verdict"] == "gain" and rep["rounds_done"] == 4 and not rep["problems"]
    assert [s["batch_size"] for s in rep["shapes"]] == [1, 64]
    for s in rep["shapes"]:
        ba, ca = s["decode"]["b_over_a"], s["decode"]["c_over_a"]
        assert s["decode"]["verdict"] == "gain" and ba["high"] < 1.0 and ca["low"] <= 1.0 <= ca["high"]
        assert len(s["decode"]["samples"]["A"]) == 4
    calls = {r["arm"]: r for r in rep["patch_calls"]}
    assert calls["B"]["served_by_patch"] > 0 and calls["B"]["served_by_original"] == 0
    assert calls["C"]["served_by_patch"] == 0 and calls["C"]["served_by_original"] > 0
    assert set(calls) == {"B", "C"}                          # A: patches off, no hooks, no records
    # the order rotates, and each arm is the environment it claims
    assert [next(a for a in "ABC" if _arm(out, r, a)["position"] == 0) for r in (1, 2, 3, 4)] == ["A", "B", "C", "A"]
    envs = {a: _arm(out, 1, a)["env"] for a in "ABC"}
    assert envs["A"]["ASTRA_SGLANG_PATCHES"] == "off" and "ASTRA_SGLANG_PLACEBO" not in envs["A"]
    assert envs["B"]["ASTRA_SGLANG_PATCHES"] == "all" and "ASTRA_SGLANG_PLACEBO" not in envs["B"]
    assert envs["C"]["ASTRA_SGLANG_PATCHES"] == "all" and envs["C"]["ASTRA_SGLANG_PLACEBO"] == "1"
    assert _arm(out, 1, "B")["patches_source"] == "status records"
    cmd = _arm(out, 1, "A")["command"]
    assert cmd[cmd.index("--result-filename") + 1] == str(out / "r001" / "A" / "result.jsonl")
    assert cmd[cmd.index("--batch-size"):cmd.index("--batch-size") + 3] == ["--batch-size", "1", "64"]
    assert json.loads((out / "report.json").read_text())["verdict"] == "gain"
    if importlib.util.find_spec("matplotlib") is not None:
        assert (out / "e2e.png").stat().st_size > 0


def test_the_report_says_whether_the_slow_processes_ran_on_lower_clocks(tmp_path, capsys, monkeypatch):
    """Why separate processes differ by 3-6% was never measured: each forward prints its GPU's clocks (ASTRA-GPU,
    here a STAND-IN GPU whose slow processes ran on low clocks) and the report ranks step time within each arm
    against them; without the line the report says the state is missing, never guesses."""
    monkeypatch.setenv("STANDIN_B_FACTOR", "0.9")
    monkeypatch.setenv("STANDIN_CLOCKS", "1")
    out = tmp_path / "run"
    assert main(_e2e(out, rounds=4)) == 0
    rep = _report(capsys)
    assert _arm(out, 1, "B")["gpu"]["gpu"] == "STAND-IN GPU"
    assert [f.split(":")[0] for f in rep["gpu_findings"]] == ["bs 1", "bs 64"]
    for finding in rep["gpu_findings"]:
        rho = float(finding.split("median SM clock ")[1].split(";")[0])
        assert "12 processes" in finding and rho < -0.9, finding  # the slow ones were on low clocks
        assert "clock-event reasons seen: software power cap" in finding, finding
    monkeypatch.delenv("STANDIN_CLOCKS")
    assert main(_e2e(tmp_path / "bare", rounds=4)) == 0
    assert all("GPU state of 0 of 12 processes" in f for f in _report(capsys)["gpu_findings"])


def test_a_run_too_short_for_any_verdict_says_so_before_it_spends_the_device(tmp_path, capsys, monkeypatch):
    """Two rounds of 47 s processes on the H200 could never give a verdict (2026-12-04); the user is told at once."""
    from astra_sglang.e2e.stats import fewest_processes

    assert fewest_processes() == 4
    monkeypatch.setenv("STANDIN_B_FACTOR", "0.5")               # twice as fast: still no verdict from 2 rounds
    assert main(_e2e(tmp_path / "run", rounds=2)) == 0
    captured = capsys.readouterr()
    assert "--max-rounds 2: with fewer than 4 processes per arm no interval can exclude 1" in captured.err
    assert json.loads(captured.out)["verdict"] == "no measurable change"


def test_patch_that_changes_nothing_is_no_measurable_change(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("STANDIN_B_FACTOR", "1.0")
    assert main(_e2e(tmp_path / "run", rounds=4)) == 0
    rep = _report(capsys)
    assert rep["verdict"] == "no measurable change"
    assert all(s["decode"]["b_over_a"]["low"] <= 1.0 <= s["decode"]["b_over_a"]["high"] for s in rep["shapes"])


def test_a_patch_expected_by_id_that_never_served_blocks_the_gain(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("STANDIN_B_FACTOR", "0.9")
    assert main(_e2e(tmp_path / "run", "--patches", "standin-patch,other-patch")) == 0
    rep = _report(capsys)
    assert rep["verdict"] == "no measurable change"
    assert "patch other-patch served no calls in round 1's B process" in rep["problems"]


def test_a_crashed_run_keeps_its_finished_processes_and_resumes(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    monkeypatch.setenv("STANDIN_FAIL", "2:C")                 # round 2 runs B C A: B finishes, C crashes
    assert main(_e2e(out)) == 2
    err = capsys.readouterr().err
    assert "astra-sglang: error: round 2 arm C: the forward exited with 3 (stand-in: simulated crash)" in err
    assert "Traceback" not in err
    kept = {p: p.stat().st_mtime_ns for p in out.glob("r*/*/arm.json")}
    assert sorted(str(p.relative_to(out)) for p in kept) == ["r000/W1/arm.json", "r001/A/arm.json",
                                                             "r001/B/arm.json", "r001/C/arm.json",
                                                             "r002/B/arm.json"]   # r000/W1: the warm-up
    assert json.loads((out / "report.json").read_text())["rounds_done"] == 1
    monkeypatch.delenv("STANDIN_FAIL")
    assert main(_e2e(out)) == 0
    captured = capsys.readouterr()
    assert "resuming" in captured.err and "5 finished process(es) kept" in captured.err
    assert "warm-up" not in captured.err                                # done once, not repeated
    assert json.loads(captured.out)["rounds_done"] == 3
    assert all(p.stat().st_mtime_ns == t for p, t in kept.items())   # not run again
    assert "round 2: B" not in captured.err and "round 2: C" in captured.err


def test_another_measurement_in_the_same_folder_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_e2e(out, rounds=2)) == 0
    capsys.readouterr()
    assert main([*_e2e(out, rounds=2)[:-1], "other-model"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "another measurement (different one_batch_args)" in err


@pytest.mark.parametrize("argv, message", [
    (["e2e", "--forward", str(STANDIN)], "nothing to run: give the one_batch"),
    (["e2e", "--forward", str(STANDIN), "--", "--model-path", "M", "--result-filename", "x"],
     "--result-filename is e2e's own"),
    (["e2e", "--forward", str(STANDIN), "--batch-size", "2", "--", "--model-path", "M", "--batch-size", "4"],
     "--batch-size given both before and after `--`"),
    (["e2e", "--forward", "/nonexistent/fwd.py", "--", "--model-path", "M"], "--forward /nonexistent/fwd.py: no such"),
    (["e2e", "--rounds", "6", "--max-rounds", "3", "--forward", str(STANDIN), "--", "--model-path", "M"],
     "--max-rounds 3 is below --rounds 6"),
])
def test_bad_input_is_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err


def test_default_forward_says_what_it_needs(capsys, monkeypatch):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    if importlib.util.find_spec("sglang") is not None:
        assert main(["e2e", "--", "--model-path", "M"]) == 2
        assert "no CUDA GPU visible: SGLang's model forward (one_batch) needs one" in capsys.readouterr().err
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "sglang" else real(name, *a))
    assert main(["e2e", "--", "--model-path", "M"]) == 2
    assert "SGLang is not installed in this Python" in capsys.readouterr().err


def test_arm_order_rotates():
    from astra_sglang.e2e.runner import arm_order

    assert [arm_order(r) for r in (1, 2, 3, 4)] == [("A", "B", "C"), ("B", "C", "A"), ("C", "A", "B"),
                                                    ("A", "B", "C")]


def test_the_default_forward_is_in_the_installed_package_not_the_checkout():
    """A user who pip-installed astra-sglang has no scripts/ folder: the default forward is a module of the package
    (SGLang's one_batch after load_plugins), run with this Python."""
    import sys

    from astra_sglang.e2e.runner import default_forward

    cmd = default_forward()
    assert cmd[:2] == [sys.executable, "-m"] and importlib.util.find_spec(cmd[2]) is not None
    assert cmd[2] == "astra_sglang.profile.one_batch_child"


def test_a_forward_that_died_is_named_by_its_exception_not_the_teardown_warning_after_it(tmp_path):
    """H100, 2026-12-05: the e2e error quoted NCCL's "destroy_process_group() was not called" warning, printed after
    the traceback of the OutOfMemoryError that killed arm A; the exception is what the user must see."""
    from astra_sglang.e2e.runner import why_it_died

    log = tmp_path / "stderr.log"
    log.write_text("[rank0]: Traceback (most recent call last):\n"
                   "[rank0]:   File \"activation.py\", line 148, in forward_cuda\n"
                   "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB.\n"
                   "[rank0]:[W1205 15:38:58.968684730 ProcessGroupNCCL.cpp:1575] Warning: WARNING: "
                   "destroy_process_group() was not called before program exit\n")
    why = why_it_died(log)
    assert why.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB.")
    assert "--mem-fraction-static" in why
    log.write_text("stand-in: simulated crash\n")
    assert why_it_died(log) == "stand-in: simulated crash"
    assert why_it_died(tmp_path / "none.log") == "no output on stderr"


def test_a_run_folder_resumed_on_another_gpu_model_is_refused(tmp_path, capsys, monkeypatch):
    """A run carried back from one device call and resumed on the next can land on an H200 after an H100: pooling
    the two models' step times would read their difference as the patch's. Resuming on the same model goes on."""
    from astra_sglang.profile import gpu_state

    out = tmp_path / "run"
    monkeypatch.setenv("STANDIN_CLOCKS", "1")                       # the processes name their GPU: STAND-IN GPU
    monkeypatch.setattr(gpu_state, "this_gpu", lambda nvml=None: "")  # the parent without NVML: nothing to compare
    assert main(_e2e(out, rounds=2)) == 0
    capsys.readouterr()
    monkeypatch.setattr(gpu_state, "this_gpu", lambda nvml=None: "NVIDIA H200")
    assert main(_e2e(out, rounds=3)) == 2
    err = capsys.readouterr().err
    assert "ran on STAND-IN GPU, this machine has NVIDIA H200" in err and "Traceback" not in err
    monkeypatch.setattr(gpu_state, "this_gpu", lambda nvml=None: "stand-in  gpu")
    assert main(_e2e(out, rounds=3)) == 0


def test_the_cross_process_forward_gets_the_prefill_grouping_and_nothing_else_does(tmp_path, capsys, monkeypatch):
    """--prefill-chunk-tokens reaches every process of a cross-process run (profile's child reads it there); a
    variable left in the user's shell reaches none."""
    monkeypatch.setenv("STANDIN_PREFILL_LIMIT", "32")

    def e2e(out: Path, *extra: str) -> list[str]:
        return ["e2e", "--rounds", "3", "--max-rounds", "3", "--out", str(out), "--forward", str(STANDIN),
                "--batch-size", "4", "--input-len", "16", "--json", *extra, "--", "--model-path", "m"]

    monkeypatch.setenv("ASTRA_PREFILL_CHUNK_TOKENS", "32")
    assert main(e2e(tmp_path / "one-shot")) != 0
    assert "CUDA out of memory" in capsys.readouterr().err
    monkeypatch.delenv("ASTRA_PREFILL_CHUNK_TOKENS")
    out = tmp_path / "grouped"
    assert main(e2e(out, "--prefill-chunk-tokens", "32")) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["config"]["prefill_chunk_tokens"] == 32 and rep["rounds_done"] == 3
    assert main([*e2e(tmp_path / "tp2", "--prefill-chunk-tokens", "32"), "--tp-size", "2"]) != 0
    assert "--tp-size 1 only" in capsys.readouterr().err
