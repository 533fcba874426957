"""Rough edges a new user hit on a CPU host: each test runs the real CLI and checks what the user sees.

Run folders are written with the loop's own schemas; no time in them is a measurement (this host has no GPU).
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from astra_sglang.cli.args import has_default
from astra_sglang.cli.main import build_parser, main
from astra_sglang.contract.result import BuildReport, CorrectnessReport, EvalResult
from astra_sglang.loop.records import LoopOptions, RoundRecord, RunMeta, WinnerInfo
from astra_sglang.loop.runfolder import RunFolder, now_iso

ROOT = Path(__file__).resolve().parents[1]
MERGE_STATE = ROOT / "extracted" / "merge_state"


def _one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


# ------------------------------------------------------------------------------------------------ report


def _run(runs: Path, run_id: str, speedups: list[float | None], winner: WinnerInfo | None = None) -> Path:
    """A run folder whose rounds 1.. recorded these speedups (None: correct but untimed, as on a CPU host)."""
    folder = RunFolder.create(runs, "merge_state", run_id)
    if speedups:
        folder.finish_round(RoundRecord(round=0, status="ok", correct=True))
    for i, speed in enumerate(speedups, 1):
        folder.finish_round(RoundRecord(round=i, status="ok", correct=True, geomean_speedup=speed))
    folder.write_meta(RunMeta(run_id=run_id, op="merge_state", op_id="attention.merge_state_triton",
                              op_dir="extracted/merge_state", model="scripted", rounds=max(1, len(speedups)),
                              mode="multi-agent", created=now_iso(), updated=now_iso(),
                              status="done" if speedups else "running", options=LoopOptions(), winner=winner))
    return folder.path


def test_report_of_an_untimed_run_says_untimed_and_lands_in_the_run_folder(tmp_path: Path, capsys,
                                                                            monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("matplotlib")
    run = _run(tmp_path / "runs", "cpu", [None, None],
               WinnerInfo(round=None, reason="no timing on this device: correct candidates are listed"))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert main(["report", str(run)]) == 0
    page = run / "report.md"
    assert f"report: {page}" in capsys.readouterr().out
    text = page.read_text()
    assert "| merge_state/cpu | (no label recorded) | scripted | multi-agent, K=1 candidate a round | 2 | untimed" in text
    assert "1.000x" not in text and "| 1.000 |" not in text  # the original's 1.0x is not a result nobody measured
    assert list(cwd.iterdir()) == []  # nothing in the current directory


def test_one_run_without_a_finished_round_does_not_sink_the_others(tmp_path: Path, capsys):
    pytest.importorskip("matplotlib")
    runs = tmp_path / "runs"
    done = _run(runs, "done", [1.5])
    fresh = _run(runs, "fresh", [])
    assert main(["report", str(done), str(fresh)]) == 0
    out = capsys.readouterr().out
    page = runs / "merge_state" / "report.md"  # the folder holding both runs
    assert f"{fresh}: no finished round" in out and f"report: {page}" in out
    text = page.read_text()
    assert "| merge_state/done |" in text and "| 1.500x |" in text
    assert "| merge_state/fresh | (no label recorded) | scripted | multi-agent, K=1 candidate a round | 0 | " \
           "no finished round |" in text
    # alone, such a run is still nothing to report: one line
    assert "no finished round" in _one_line(capsys, ["report", str(fresh)])


# ---------------------------------------------------------------------------------------------- evaluate


def test_evaluate_prints_items_in_the_order_it_runs_them(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch):
    """Evaluations under one spec run together as one batch, and the originals' sweeps after every evaluation, so
    queue order is not run order: the printed order must be the run order."""
    import astra_sglang.harness.parent.evaluate as harness_evaluate
    import astra_sglang.loop.evaluator as evaluator
    from astra_sglang.loop.evaluator import EvalPending, QueueEvaluator
    from astra_sglang.loop.records import EvalSpec, TuneOutcome

    queue = tmp_path / "queue"
    cand = tmp_path / "candidate.py"
    cand.write_text("# a candidate\n")
    test, paper = EvalSpec(shapes="test"), EvalSpec(shapes="paper")
    for run_id, spec in (("a", test), ("b", paper), ("c", test)):  # queue order: a, b-tune, b, c
        with pytest.raises(EvalPending):
            QueueEvaluator(MERGE_STATE, queue, run_id).evaluate("r001", cand, spec)
    with pytest.raises(EvalPending):
        QueueEvaluator(MERGE_STATE, queue, "b").sweep_baseline(paper)
    ran: list[str] = []

    def fake_evaluate_many(op_dir, candidates, config=None, on_result=None):  # type: ignore[no-untyped-def]
        results = []
        for i, c in enumerate(candidates):
            ran.append(Path(c).parent.name)
            r = EvalResult(op_id="attention.merge_state_triton", device="cpu (test stand-in)", sglang_version="0.5.23",
                           build=BuildReport(ok=True), correctness=CorrectnessReport(ok=True, cases_run=1))
            on_result(i, r)
            results.append(r)
        return results

    def fake_tune(op_dir, config, partial=None):  # type: ignore[no-untyped-def]
        ran.append("b--r000-tune")
        return TuneOutcome(error="test stand-in")

    monkeypatch.setattr(harness_evaluate, "evaluate_many", fake_evaluate_many)
    monkeypatch.setattr(evaluator, "run_tune", fake_tune)
    assert main(["evaluate", str(queue), "--extracted", str(MERGE_STATE.parent), "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    printed = [ln.split()[1] for ln in lines if ln.startswith("evaluating ")]
    assert printed == ran == ["a--r001", "c--r001", "b--r001", "b--r000-tune"]
    # each answer as it is written, the sweep's too
    assert [ln.split(":")[0].strip() for ln in lines if ln.startswith("  ")] == ["a--r001", "c--r001", "b--r001",
                                                                                 "b--r000-tune"]


# ------------------------------------------------------------------------------------------------- serve


@pytest.mark.parametrize("argv", [["serve"], ["serve", "--"], ["serve", "--dry-run"]])
def test_serve_without_server_arguments_is_one_line(capsys, monkeypatch: pytest.MonkeyPatch, argv: list[str]):
    def no_exec(*a: object) -> None:
        raise AssertionError(f"launched SGLang: {a}")

    monkeypatch.setattr(os, "execvpe", no_exec)
    line = _one_line(capsys, argv)
    assert "nothing to launch" in line and "-- --model-path" in line


# ------------------------------------------------------------------------------------------------- paths


def test_a_folder_given_as_a_file_is_named_a_folder(capsys, tmp_path: Path):
    folder = tmp_path / "kernel.py"  # even with a file's suffix
    folder.mkdir()
    line = _one_line(capsys, ["bench", str(MERGE_STATE), "--candidate", str(folder), "--device", "cpu", "--json"])
    assert f"{folder} is a directory" in line and "does not exist" not in line
    line = _one_line(capsys, ["bench", str(MERGE_STATE), "--candidate", str(tmp_path / "nope.py"), "--json"])
    assert "does not exist" in line
    line = _one_line(capsys, ["patches", "add", "--op", "merge_state", "--source", str(folder), "--id", "polish1",
                              "--provenance", "scripted"])
    assert f"kernel source {folder} is a directory" in line and "does not exist" not in line


# ---------------------------------------------------------------------------------------------- optimize


def test_optimize_zero_rounds_is_refused(capsys, tmp_path: Path):
    line = _one_line(capsys, ["optimize", str(MERGE_STATE), "--rounds", "0", "--runs-dir", str(tmp_path / "runs")])
    assert "argument --rounds" in line and ">= 1" in line
    assert not (tmp_path / "runs").exists()


def test_optimize_with_a_taken_run_id_creates_nothing(capsys, tmp_path: Path, validated_merge_state: Path):
    runs = tmp_path / "runs"
    taken = runs / "merge_state" / "mine"
    taken.mkdir(parents=True)
    inbox = tmp_path / "inbox"
    line = _one_line(capsys, ["optimize", str(validated_merge_state), "--runs-dir", str(runs), "--run-id", "mine",
                              "--model", f"file:{inbox}", "--device", "cpu", "--shapes", "test", "--no-live"])
    assert f"run folder {taken} already exists" in line and "--resume mine" in line
    assert not inbox.exists()  # refused before the model probe made its folder
    assert list(taken.iterdir()) == []


# ------------------------------------------------------------------------------------------------- --help


def _options(parser: argparse.ArgumentParser, name: str):  # type: ignore[no-untyped-def]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, p in action.choices.items():
                yield from _options(p, f"{name} {sub}")
        elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)) \
                and action.help != argparse.SUPPRESS:
            yield name, parser, action


def test_every_option_of_every_command_says_what_it_does_and_its_default():
    missing = []
    for name, parser, action in _options(build_parser(), "astra-sglang"):
        what = f"{name} {'/'.join(action.option_strings) or action.dest}"
        if not (action.help or "").strip():
            missing.append(f"{what}: no help")
            continue
        shown = " ".join(parser._get_formatter()._expand_help(action).split())
        d = action.default
        if has_default(action) and not any(v in shown for v in {str(d), f"{d:g}" if isinstance(d, float) else ""} - {""}):
            missing.append(f"{what}: default {d!r} not in {shown!r}")
    assert missing == []


def test_help_shows_a_default_once(capsys):
    assert main(["optimize", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "no timing, so no winner) (default: auto)" in text  # --device, which had no help at all
    assert "(default 5; on resume: extend)" in text and "(default: 5" not in text  # stated in its own words
    assert "(default: None)" not in text and "(default: False)" not in text


# ---------------------------------------------------------------------------------------- setup_env.sh

NOISE = """\
WARNING: Location 'file:///opt/pypi/simple/msgspec/' is ignored: it is neither a file nor a directory.
WARNING: Location 'file:///opt/pypi-more/simple/msgspec/' is ignored: it is neither a file nor a directory.
ERROR: pip's dependency resolver does not currently take into account all the packages that are installed. \
This behaviour is the source of the following dependency conflicts.
sglang 0.5.23 requires aiohttp, which is not installed.
sglang 0.5.23 requires openai==2.8.0, but you have openai 3.1.0 which is incompatible.
flashinfer-python 0.7.2 requires nvidia-cudnn-frontend>=1.13.0, which is not installed.
"""
FAKE_PIP = """#!/usr/bin/env bash
echo "$*" >> "$(dirname "$0")/calls.log"
cat "$(dirname "$0")/noise.txt"
case "$*" in *"$FAIL_ON"*) echo "ERROR: No matching distribution found for $FAIL_ON" >&2; exit 1;; esac
exit 0
"""


def _setup_copy(tmp_path: Path, noise: str) -> Path:
    """scripts/setup_env.sh in a folder of its own, whose .venv/bin/python is a pip that prints ``noise``."""
    (tmp_path / "scripts").mkdir()
    shutil.copy2(ROOT / "scripts" / "setup_env.sh", tmp_path / "scripts" / "setup_env.sh")
    bindir = tmp_path / ".venv" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "python").write_text(FAKE_PIP)
    (bindir / "python").chmod(stat.S_IRWXU)
    (bindir / "noise.txt").write_text(noise)
    return tmp_path


def test_setup_env_hides_the_expected_pip_noise_and_says_so_once(tmp_path: Path):
    real = "foo 1.0 requires bar<2, but you have bar 2.1 which is incompatible.\n"
    root = _setup_copy(tmp_path, NOISE + real)
    r = subprocess.run(["bash", str(root / "scripts" / "setup_env.sh")], capture_output=True, text=True,
                       env=dict(os.environ, FAIL_ON="no-such-step"), timeout=60)
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert "Location 'file:///opt/pypi" not in out and "sglang 0.5.23 requires" not in out
    assert "flashinfer-python 0.7.2 requires" not in out
    assert sum("--no-deps on purpose" in ln for ln in out.splitlines()) == 1
    # another package's conflict is real: it stays, with pip's header line before it
    assert out.count("dependency resolver does not currently") == 5 and out.count(real.strip()) == 5
    assert "shared/notes" not in (root / "scripts" / "setup_env.sh").read_text()  # cites what the repository has


def test_setup_env_still_fails_when_pip_fails(tmp_path: Path):
    root = _setup_copy(tmp_path, NOISE)
    r = subprocess.run(["bash", str(root / "scripts" / "setup_env.sh")], capture_output=True, text=True,
                       env=dict(os.environ, FAIL_ON="torch==2.13.0"), timeout=60)
    assert r.returncode != 0
    assert "ERROR: No matching distribution found for torch==2.13.0" in r.stdout + r.stderr
    calls = (root / ".venv" / "bin" / "calls.log").read_text().splitlines()
    assert not any("sglang" in c for c in calls)  # nothing after the failed install ran
