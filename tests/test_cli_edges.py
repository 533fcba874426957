"""The edges a new user hits first: each bad input is one line and exit 2, output into a closed pipe is quiet,
and nothing the user had is lost (re-extracting, restoring). Every test runs the real CLI on CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from astra_sglang import __version__
from astra_sglang.cli.main import main
from astra_sglang.contract.base import sha256_file
from astra_sglang.contract.op import load_manifest

ROOT = Path(__file__).resolve().parents[1]
MERGE_STATE = ROOT / "extracted" / "merge_state"
SILU = ROOT / "extracted" / "silu_and_mul"


def _one_line(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 2) -> str:
    assert main(argv) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "Traceback" not in err[0] and "pydantic" not in err[0]
    return err[0]


def test_version(capsys) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"astra-sglang {__version__}"


@pytest.mark.parametrize("argv, flag", [
    (["optimize", "merge_state", "--rounds", "-1"], "--rounds"),
    (["optimize", "merge_state", "--max-fix-attempts", "-3"], "--max-fix-attempts"),
    (["optimize", "merge_state", "--max-turns", "1"], "--max-turns"),
    (["optimize", "merge_state", "--request-timeout-s", "0"], "--request-timeout-s"),
    (["bench", "merge_state", "--timeout", "0"], "--timeout"),
    (["bench", "merge_state", "--timeout", "-5"], "--timeout"),
    (["evaluate", "q", "--watch", "-1"], "--watch"),
])
def test_bad_numbers_are_refused_as_arguments(capsys, argv: list[str], flag: str) -> None:
    line = _one_line(capsys, argv)
    assert f"argument {flag}" in line and "must be" in line, line


def test_runs_dir_that_cannot_be_created(capsys, tmp_path: Path, validated_merge_state: Path) -> None:
    line = _one_line(capsys, ["optimize", str(validated_merge_state), "--runs-dir", "/proc/astra-nope", "--model",
                              f"file:{tmp_path / 'inbox'}", "--device", "cpu", "--shapes", "test", "--no-live"])
    assert "cannot create the run folder /proc/astra-nope/merge_state/" in line and "--runs-dir" in line


def test_extract_out_is_a_file(capsys, tmp_path: Path) -> None:
    out = tmp_path / "a-file"
    out.write_text("mine")
    line = _one_line(capsys, ["extract", "merge_state", "--out", str(out)])
    assert f"--out {out} is a file, not a folder" in line
    assert out.read_text() == "mine"


@pytest.mark.parametrize("op, name, wanted", [
    (MERGE_STATE, "k.cuh", "takes a .py candidate"),
    (SILU, "k.py", "takes a .cuh candidate"),
])
def test_candidate_in_the_other_language(capsys, tmp_path: Path, op: Path, name: str, wanted: str) -> None:
    cand = tmp_path / name
    cand.write_text("template <typename T> void k() {}\n" if name.endswith(".cuh") else "def k():\n    pass\n")
    line = _one_line(capsys, ["bench", str(op), "--candidate", str(cand), "--device", "cpu", "--shapes", "test"])
    assert f"this op ({op.name}) {wanted}" in line and name in line


def test_optimize_without_a_gpu_points_to_the_queue(tmp_path: Path, validated_merge_state: Path) -> None:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    runs = tmp_path / "runs"
    r = subprocess.run([sys.executable, "-m", "astra_sglang", "optimize", str(validated_merge_state), "--runs-dir", str(runs),
                        "--model", f"file:{tmp_path / 'inbox'}", "--no-live"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2, r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "no CUDA GPU visible" in err[0] and "--eval-queue DIR" in err[0]
    assert "astra-sglang evaluate DIR" in err[0] and "--resume" in err[0]
    assert not runs.exists()  # refused before any work


def test_evaluate_without_a_gpu_writes_no_untimed_result(tmp_path: Path) -> None:
    from astra_sglang.loop.evaluator import (
        REQUEST_NAME,
        RESULT_NAME,
        EvalPending,
        QueueEvaluator,
    )
    from astra_sglang.loop.records import EvalSpec

    queue = tmp_path / "queue"
    with pytest.raises(EvalPending):
        QueueEvaluator(MERGE_STATE, queue, "run1").evaluate("r000-original", None, EvalSpec(shapes="test"))
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "astra_sglang", "evaluate", str(queue), "--extracted",
                        str(MERGE_STATE.parent)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2, r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "no CUDA GPU visible: 1 request(s)" in err[0] and "--device cpu" in err[0]
    item = queue / "run1--r000-original"
    assert (item / REQUEST_NAME).is_file() and not (item / RESULT_NAME).exists()


def test_queue_or_explicit_cpu_lets_optimize_run_without_a_gpu() -> None:
    from astra_sglang.loop.records import EvalSpec, LoopOptions
    from astra_sglang.loop.session import require_timing_device

    require_timing_device(LoopOptions(eval_queue="/tmp/q", eval=EvalSpec(device="auto")))
    require_timing_device(LoopOptions(eval=EvalSpec(device="cpu")))


@pytest.mark.parametrize("argv", [["extract", "--list", "--json"], ["patches", "list", "--json"],
                                  ["patches", "show", "merge-state-mr-k1", "--json"], ["doctor", "--json"]])
def test_a_closed_pipe_is_not_a_traceback(argv: list[str]) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "astra_sglang", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first byte, like `| head` after its line
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err and err.strip() == ""


def test_doctor_reports_this_host(capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib.metadata import version

    cache = tmp_path / "cache"
    (cache / "builds").mkdir(parents=True)
    (cache / "builds" / "blob").write_bytes(b"x" * (3 << 20))
    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(cache))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    facts = {f["name"]: f for f in report["facts"]}
    assert set(facts) >= {"sglang", "gpu", "nvcc", "ninja", "tvm-ffi", "cache", "optimizer extra"}
    assert facts["sglang"]["ok"] and facts["sglang"]["detail"].startswith(version("sglang") + " at ")
    assert facts["sglang"]["detail"].endswith("site-packages/sglang")
    assert facts["cache"]["detail"].startswith(f"{cache}, 3.0 MiB")
    assert facts["optimizer extra"]["ok"] == ("openai-agents " in facts["optimizer extra"]["detail"])
    ids = {p["patch_id"]: p for p in report["patches"]}
    assert {"merge-state-mr-k1", "fused-add-rmsnorm-mr-k4"} <= set(ids)
    import torch

    if not torch.cuda.is_available():
        assert not facts["gpu"]["ok"]
        assert all(not p["applies_here"] and p["why_not"] == "no CUDA device" for p in ids.values())
    assert main(["doctor"]) == 0
    text = capsys.readouterr().out
    assert "merge-state-mr-k1 (merge_state): " in text and f"{cache}, 3.0 MiB" in text


def facts_ok(report: dict, name: str) -> bool:
    return bool(next(f for f in report["facts"] if f["name"] == name)["ok"])


@pytest.mark.gpu
def test_doctor_on_a_gpu_names_its_arch_and_what_applies(capsys) -> None:
    import torch

    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    gpu = next(f for f in report["facts"] if f["name"] == "gpu")
    assert gpu["ok"] and f"({arch})" in gpu["detail"] and torch.cuda.get_device_name() in gpu["detail"]
    merge = next(p for p in report["patches"] if p["patch_id"] == "merge-state-mr-k1")
    if facts_ok(report, "sglang"):  # validated on SGLang 0.5.23 / sm_90, and only on the GPU models it was measured on
        manifest = json.loads((ROOT / "patches" / "merge_state" / "merge-state-mr-k1" / "manifest.json").read_text())
        measured_here = torch.cuda.get_device_name() in manifest["validated_on"]["gpus"]
        assert merge["applies_here"] == (arch == "sm_90" and measured_here), merge
        if arch == "sm_90" and not measured_here:  # an H100 for this H200-measured patch: the GPU gate says so
            assert "patch measured on" in merge["why_not"] and "patches verify" in merge["why_not"], merge
    else:  # a GPU host without SGLang (the H200 here): the reason is SGLang, not the device
        assert not merge["applies_here"] and merge["why_not"] == "SGLang is not installed", merge


def test_serving_commands_work_without_rich(tmp_path: Path) -> None:
    """rich is not in SGLang's environment: the commands a serving install runs print plain text."""
    code = ("import sys; sys.modules['rich'] = None\n"
            "from astra_sglang.cli.main import main\n"
            "for argv in (['extract', '--list'], ['patches', 'list'], ['doctor']):\n"
            "    assert main(argv) == 0, argv\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "yes -> merge_state" in r.stdout and "merge-state-mr-k1" in r.stdout
    assert "[green]" not in r.stdout and "Traceback" not in r.stderr


# ------------------------------------------------------------------------------- nothing the user had is lost


def test_reextract_keeps_what_extract_did_not_write(capsys, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["extract", "merge_state", "--out", str(out)]) == 0
    op = out / "merge_state"
    manifest = load_manifest(op)
    kernel = next(f.path for f in manifest.files if f.role == "kernel")
    (op / "notes.txt").write_text("my notes")
    (op / "build" / "entry").mkdir(parents=True)
    (op / "build" / "entry" / "k.so").write_bytes(b"\x7fELF")
    (op / "reference.py").write_text((op / "reference.py").read_text() + "\n# my edit\n")
    (op / kernel).write_text("# my rewrite of the kernel\n")
    capsys.readouterr()

    assert main(["extract", "merge_state", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "you had edited 2 of its file(s); kept as reference.py.edited-" in err
    assert "kept 2 file(s) extract did not write: build/ (1 file), notes.txt;" in err.replace("\n", " ")
    assert (op / "notes.txt").read_text() == "my notes"
    assert (op / "build" / "entry" / "k.so").read_bytes() == b"\x7fELF"
    fresh = load_manifest(op)
    assert all(sha256_file(op / f.path) == f.sha256 for f in fresh.files)  # its own files are new copies
    edited = sorted(p.name for p in op.glob("reference.py.edited-*"))
    assert len(edited) == 1 and (op / edited[0]).read_text().endswith("# my edit\n")
    backups = list((op / kernel).parent.glob(Path(kernel).name + ".edited-*"))
    assert len(backups) == 1 and backups[0].read_text() == "# my rewrite of the kernel\n"
    assert sorted(p.name for p in out.iterdir()) == ["merge_state"]  # no temporary folders left


def test_restore_says_what_it_overwrote_and_keeps_the_edit(tmp_path: Path) -> None:
    import shutil

    op = tmp_path / "merge_state"
    shutil.copytree(MERGE_STATE, op, ignore=shutil.ignore_patterns("build"))
    manifest = load_manifest(op)
    kernel = next(f.path for f in manifest.files if not f.committed and f.role == "kernel")
    (op / kernel).write_text("# edited by hand\n")
    r = subprocess.run([sys.executable, "-m", "astra_sglang", "extract", "--restore", "--out", str(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    backups = list((op / kernel).parent.glob(Path(kernel).name + ".edited-*"))
    assert len(backups) == 1 and backups[0].read_text() == "# edited by hand\n"
    backup_rel = backups[0].relative_to(op).as_posix()
    assert f"overwrote 1 file(s) that differed from the installed package: {kernel} (your version: {backup_rel})" \
        in r.stdout
    assert all(sha256_file(op / f.path) == f.sha256 for f in manifest.files)


CTRL_C_SCRIPT = r'''
import asyncio, os, signal, sys, threading, time
from astra_sglang.cli.main import run_handler

async def model_call_that_drains_first():
    # what openai-agents does with an in-flight model call: on cancellation it waits for the call to finish
    call = asyncio.ensure_future(asyncio.sleep(60))
    try:
        await asyncio.shield(call)
    except asyncio.CancelledError:
        await call
        raise

def handler(args):
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    asyncio.run(model_call_that_drains_first())
    return 0

t0 = time.monotonic()
code = run_handler(handler, None)
print(f"exit {code} after {time.monotonic() - t0:.1f} s")
sys.exit(code)
'''


def test_ctrl_c_interrupts_a_model_call_that_drains_before_honouring_cancellation(tmp_path: Path) -> None:
    """Ctrl-C once waited for the in-flight model answer: asyncio.run turned it into a cancellation of its main
    task, which openai-agents lets finish the call first (the SIGINT case of test_loop_resume timed out so)."""
    from loop_support import ctrl_c_deliverable

    r = subprocess.run([sys.executable, "-c", CTRL_C_SCRIPT], capture_output=True, text=True, timeout=50,
                       preexec_fn=ctrl_c_deliverable)
    assert r.returncode == 130, r.stdout + r.stderr
    assert "interrupted; everything written so far is kept" in r.stderr and "Traceback" not in r.stderr
    seconds = float(r.stdout.split("after ")[1].split(" s")[0])
    assert seconds < 10, r.stdout
