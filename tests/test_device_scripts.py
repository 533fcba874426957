"""The device scripts' own logic, on the CPU: what a device call returns must be right the first time (30 device
minutes a session, and a lost call is not repeated within it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

DEVICE = Path(__file__).resolve().parents[1] / "scripts" / "device"


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"device_{name}", DEVICE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_sandbox_probe_reports_what_the_compiler_said_not_only_the_traceback():
    """The H100's Landlock probe came back as "CalledProcessError: Command '['/opt/gcc/bin/gcc', ..." cut at 300
    characters (2026-12-05): the compiler's own words, printed before the traceback, were dropped."""
    why = _script("sandbox_probe")._why(
        "/opt/gcc/x86_64-pc-linux-gnu/bin/as: Permission denied\n"
        "collect2: error: ld returned 1 exit status\n"
        "Traceback (most recent call last):\n"
        '  File "probe.py", line 9, in <module>\n'
        "    _double[(4,)](x, y, 1000, BLOCK=256)\n"
        "          ^^^^^^^^^^\n"
        "subprocess.CalledProcessError: Command '['/opt/gcc/bin/gcc', 'cuda_utils.c']' returned non-zero exit status 1.\n")
    assert why.startswith("/opt/gcc/x86_64-pc-linux-gnu/bin/as: Permission denied | collect2: error")
    assert why.endswith("returned non-zero exit status 1.") and "File " not in why and "^^^" not in why


def test_the_layout_probe_places_a_batch_as_a_fresh_allocator_and_decode_steps_would():
    torch = pytest.importorskip("torch")
    layout = _script("da_layout_probe").layout
    lens = torch.tensor([20, 5, 20])
    pool = 46
    old = torch.randperm(pool - 1)[:45] + 1  # the contract's random slots, and 1 stale slot past the batch
    old = torch.cat([old, torch.tensor([7])])
    assert torch.equal(layout("random", lens, pool, old), old)
    alloc = layout("alloc", lens, pool, old)
    assert alloc[:45].tolist() == list(range(1, 46)) and alloc[45] == 7  # request after request, stale tail kept
    serving = layout("serving", lens, pool, old)[:45]
    assert sorted(serving.tolist()) == list(range(1, 46))  # every slot once, slot 0 (padding) never
    # request 0: 4 prefilled slots, then 16 decode steps, one slot per request still decoding per step; request 1
    # (5 tokens: 1 prefilled, 4 decoded) joins the last 4 steps
    assert serving[:4].tolist() == [1, 2, 3, 4]
    assert serving[4:20].tolist() == [10 + 2 * t for t in range(12)] + [34, 37, 40, 43]
    assert serving[20:25].tolist() == [5, 35, 38, 41, 44]


def test_the_layout_probe_passes_q_as_llamas_view_of_the_fused_qkv_rows():
    torch = pytest.importorskip("torch")
    q = torch.randn(3, 32, 16)
    v = _script("da_layout_probe").qkv_view(q)
    assert torch.equal(v, q) and not v.is_contiguous() and v.stride() == ((32 + 2 * 8) * 16, 16, 1)


@pytest.mark.parametrize("script", sorted(p.name for p in DEVICE.glob("*.sh"))
                         + sorted(f"../h200_server/{p.name}" for p in (DEVICE.parent / "h200_server").glob("*.sh")))
def test_every_device_shell_script_parses(script: str) -> None:
    """A device call lost to a shell syntax error is not repeated within the session (30 device minutes, and starts
    fail often): each script the device runs must at least parse here."""
    import subprocess

    done = subprocess.run(["bash", "-n", str(DEVICE / script)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


def test_a_device_script_leaves_at_most_eight_files_and_keeps_its_exit_status(tmp_path):
    """The device returns at most 8 files from $OUT: revalidate.sh wrote 11 and validation.json stayed behind
    (2026-12-06). out_limit.sh packs the logs into one archive at exit; the records stay as they are."""
    import subprocess
    import tarfile

    out = tmp_path / "out"
    out.mkdir()
    records = ["heldout.json", "manifest.recorded.json", "validate.json", "validate.md", "validation.json"]
    logs = ["heldout.log", "ops-build.log", "pip-astra.log", "site.log", "validate.log", "verify.log"]
    for name in records + logs:
        (out / name).write_text(name)
    script = f'OUT={out}; . "{DEVICE / "out_limit.sh"}"; exit 3'
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert done.returncode == 3, done.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(records + ["logs.tar.gz"])
    with tarfile.open(out / "logs.tar.gz") as tar:
        assert sorted(n.removeprefix("./") for n in tar.getnames()) == sorted(logs)
    few = tmp_path / "few"
    few.mkdir()
    (few / "site.log").write_text("x")
    subprocess.run(["bash", "-c", f'OUT={few}; . "{DEVICE / "out_limit.sh"}"'], check=True)
    assert [p.name for p in few.iterdir()] == ["site.log"]  # 8 or fewer: left as they are


def test_every_device_script_that_fills_out_packs_its_logs():
    """A new device script that forgets out_limit.sh loses whatever lies past the 8th file of $OUT."""
    scripts = sorted([*DEVICE.glob("*.sh"), DEVICE.parent / "h200_server" / "ship_check.sh"])
    filling = [p for p in scripts if "OUT=${OUT:-/tmp/out}" in p.read_text()]
    assert len(filling) >= 8, [p.name for p in filling]
    assert [p.name for p in filling if "out_limit.sh" not in p.read_text()] == []


def test_passed_ids_reads_a_finished_phase_and_a_cut_one_and_skips_what_did_not_pass(tmp_path):
    """JUnit of a finished phase (failures, errors and skips left in), and the -v log of a cut phase, plain and
    under xdist: the node ids the next call leaves out (gpu_tests.sh PASSED_IN)."""
    junit = tmp_path / "gpu_tests.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_a" name="test_ok[x]" time="1"/>'
        '<testcase classname="tests.test_a" name="test_bad" time="1"><failure message="m"/></testcase>'
        '<testcase classname="tests.test_a" name="test_err" time="1"><error message="m"/></testcase>'
        '<testcase classname="tests.test_b" name="test_skip" time="0"><skipped message="m"/></testcase>'
        "</testsuite></testsuites>")
    log = tmp_path / "gpu_tests.log"
    log.write_text("[gw1] [ 33%] PASSED tests/test_c.py::test_par[1] \n"
                   "[gw0] [ 66%] FAILED tests/test_c.py::test_par[2] \n"
                   "tests/test_d.py::test_serial[a b] PASSED [  3%]\n"
                   "tests/test_d.py::test_cut \n"
                   "tests/test_a.py::test_ok[x] PASSED [  6%]\n")
    got = _script("passed_ids").passed_ids([junit, log])
    assert got == ["tests/test_a.py::test_ok[x]", "tests/test_c.py::test_par[1]"], got


def test_the_ids_of_a_real_device_run_deselect_exactly_those_tests():
    """The ids passed_ids writes are pytest's own node ids: this stop's H100 run (39 tests of phase 1 in its JUnit
    and call 3's, 5 of phase 2 in the cut log) leaves out exactly 44 of the GPU tests when handed back."""
    import subprocess

    runs = Path(__file__).resolve().parents[1] / "docs" / "measurements" / "2026-12-06-e"
    ids = _script("passed_ids").passed_ids([runs / "gpu_tests_call1_h100.xml", runs / "gpu_tests_call1_h100.log",
                                            runs / "gpu_tests_call3_h100.xml"])
    assert len(ids) == 44
    args = [a for node in ids for a in ("--deselect", node)]

    def collected(*extra: str) -> int:
        proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "gpu", "-p",
                               "no:cacheprovider", *extra, "tests"], capture_output=True, text=True,
                              cwd=runs.parents[2], timeout=300)
        tail = proc.stdout.strip().splitlines()[-1]  # "70/1272 tests collected (1202 deselected) in 8.1s"
        return int(tail.split("/")[0])

    assert collected() - collected(*args) == 44
