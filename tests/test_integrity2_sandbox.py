"""The candidate's worker runs in an OS sandbox (issue 22 class 3, ``harness/shared/sandbox.py``): what candidate code
can reach cannot change the verdict.

Three adversarial candidates (tests/candidates/merge_state/cheats/, ours), run unscreened (the screen refuses their
imports before anything runs; here the sandbox must hold on its own) on a copy of the h_merge fixture, never on
the repository's extracted folders: one rewrites the files the judge reads (the op folder's original and
reference, a planted module, the judge's Triton cache), one signals, traces and renices the judge, one starts
shells. Each records every attempt's outcome in a marker file the test makes writable for it
(``ASTRA_SGLANG_SANDBOX_WRITABLE``). The control (``ASTRA_SGLANG_SANDBOX=0``) shows the first attack succeeds
without the sandbox, and that the verdict then says no sandbox was in force. The rest test the sandbox itself
in a subprocess: what it allows (Triton's C compiler, the interpreter, threads, the worker's scratch) and
refuses, its honest level where a layer is missing, and the seccomp filter's logic on both architectures
(a small BPF interpreter below).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from h_fixtures.ops import make_h_merge, make_h_scale

from astra_sglang.contract.eval_config import EvalConfig
from astra_sglang.harness import evaluate
from astra_sglang.harness.shared import sandbox
from astra_sglang.harness.shared.sandbox import SANDBOX_ENV, SCRATCH_ENV, WRITABLE_ENV

REPO = Path(__file__).resolve().parent.parent
CHEATS = REPO / "tests" / "candidates" / "merge_state" / "cheats"
CPU = EvalConfig(shapes="test", dtypes=["bfloat16"], device="cpu", timeout_s=60, seed=4321, screen=False)
LANDLOCK = sandbox.landlock_abi()
needs_landlock = pytest.mark.skipif(LANDLOCK < 1, reason="the kernel has no Landlock (the level then says so: "
                                    "test_a_missing_landlock_is_reported_not_assumed)")


@dataclass
class Setting:
    op: Path
    marker: Path
    judge_cache: Path
    before: dict[str, bytes]

    def lines(self, name: str) -> list[str]:
        path = self.marker / name
        return path.read_text().splitlines() if path.exists() else []

    def files(self) -> dict[str, bytes]:
        return _files([self.op, self.judge_cache])


def _files(roots: list[Path]) -> dict[str, bytes]:
    """Every file under ``roots`` and its bytes (a planted file or a changed byte shows)."""
    return {str(p): p.read_bytes() for r in roots for p in sorted(r.rglob("*")) if p.is_file()}


@pytest.fixture
def setting(tmp_path, monkeypatch) -> Setting:
    op = make_h_merge(tmp_path / "ops")
    marker, judge_cache = tmp_path / "marker", tmp_path / "judge_triton_cache"
    marker.mkdir()
    judge_cache.mkdir()
    (judge_cache / "kernel.json").write_text("{}")  # a stand-in for a cached compiled original
    monkeypatch.setenv("TRITON_CACHE_DIR", str(judge_cache))  # the judge's (and the parent's) Triton cache
    monkeypatch.setenv("ASTRA_TEST_CHEAT_MARKER", str(marker))
    monkeypatch.setenv(WRITABLE_ENV, str(marker))  # the worker may write its marker there, nowhere else of ours
    targets = [op / "h_merge.py", op / "reference.py", op / "manifest.json", op, judge_cache]
    monkeypatch.setenv("ASTRA_TEST_POISON_TARGETS", os.pathsep.join(str(t) for t in targets))
    monkeypatch.delenv(SANDBOX_ENV, raising=False)
    return Setting(op, marker, judge_cache, _files([op, judge_cache]))


def _attempts(lines: list[str]) -> list[str]:
    return [ln for ln in lines if ln.endswith(": DONE") or ": denied " in ln]


@needs_landlock
def test_a_candidate_cannot_write_the_files_the_judge_reads(setting):
    r = evaluate(setting.op, CHEATS / "poisons_the_judges_files.py", CPU)
    lines = setting.lines("poisons_the_judges_files")
    assert lines and lines[-1] == "done", lines  # the attack ran to its end, in the worker
    tried = _attempts(lines)
    assert len(tried) >= 12 and all(": denied " in ln for ln in tried), tried
    assert setting.files() == setting.before  # not one byte of the judge's files changed, nothing planted
    worker_cache = next(ln for ln in lines if ln.startswith("TRITON_CACHE_DIR=")).split("=", 1)[1]
    assert worker_cache and Path(worker_cache) != setting.judge_cache  # the worker has a Triton cache of its own
    assert r.ok, r.model_dump_json(indent=1)[:3000]  # the kernel's own verdict
    # both layers, and no note: no thread of the worker predates Landlock (it is installed before torch starts one)
    assert r.sandbox == "landlock+seccomp", r.sandbox


@pytest.mark.skipif(os.geteuid() != 0, reason="the mounts layer is for root workers (the H200 runs as root)")
def test_a_root_worker_without_landlock_cannot_write_the_files_the_judge_reads(setting, monkeypatch):
    """The GPU's layers (seccomp and the read-only mounts; Landlock is off there) on the same attack, run as root
    as on the H200: every write refused, the judge's files unchanged, and the judge saw the view itself."""
    monkeypatch.setenv(SANDBOX_ENV, "seccomp+mounts")
    r = evaluate(setting.op, CHEATS / "poisons_the_judges_files.py", CPU)
    lines = setting.lines("poisons_the_judges_files")
    assert lines and lines[-1] == "done", lines
    tried = _attempts(lines)
    assert len(tried) >= 12 and all(": denied " in ln for ln in tried), tried
    assert setting.files() == setting.before
    assert r.ok, r.model_dump_json(indent=1)[:3000]
    assert r.sandbox == f"seccomp+mounts: switched to seccomp+mounts ({SANDBOX_ENV})", r.sandbox


def test_without_the_sandbox_the_same_candidate_poisons_the_op_folder_and_the_verdict_says_so(setting, monkeypatch):
    """The control: the attack is real, and a verdict without the sandbox never claims one."""
    monkeypatch.setenv(SANDBOX_ENV, "0")
    r = evaluate(setting.op, CHEATS / "poisons_the_judges_files.py", CPU)
    tried = _attempts(setting.lines("poisons_the_judges_files"))
    assert any(ln.endswith(": DONE") for ln in tried), tried
    assert setting.files() != setting.before
    assert r.sandbox == f"none: switched off ({SANDBOX_ENV}=0)", r.sandbox


def test_a_candidate_cannot_signal_trace_or_renice_the_judge(setting):
    r = evaluate(setting.op, CHEATS / "signals_the_judge.py", CPU)
    lines = setting.lines("signals_the_judge")
    assert lines and lines[-1] == "done", lines
    tried = _attempts(lines)
    assert len(tried) == len([ln for ln in lines if ln.endswith(": trying")]) >= 10, lines
    assert all(": denied PermissionError errno=1" in ln for ln in tried), tried  # EPERM, never a dead worker
    assert r.ok and r.error is None, r.model_dump_json(indent=1)[:3000]  # the judge lived to give its verdict
    assert r.sandbox is not None and "seccomp" in r.sandbox.split(":")[0], r.sandbox


@needs_landlock
def test_a_candidate_cannot_start_a_shell_and_one_the_loader_starts_is_sandboxed_too(setting):
    r = evaluate(setting.op, CHEATS / "execs_a_shell.py", CPU)
    lines = setting.lines("execs_a_shell")
    assert lines and lines[-1] == "done", lines
    for name in ("/bin/sh", "copy of /bin/sh", "written script"):
        assert f"{name}: denied PermissionError errno=13" in lines, lines
    ran = [ln for ln in lines if ln.endswith(": sh ran")]
    # Landlock's known limit: the dynamic loader must be executable, and it runs any readable program; that
    # shell inherits the sandbox: its writes to the judge's files and its SIGKILL of the judge fail
    assert ran in ([], ["/bin/sh through the loader: sh ran"]), lines
    if ran:
        out = next(ln for ln in lines if ln.startswith("/bin/sh through the loader: RAN"))
        assert "Permission denied" in out and "Operation not permitted" in out, out
    assert setting.files() == setting.before
    assert r.ok and r.error is None, r.model_dump_json(indent=1)[:3000]


# ------------------------------------------------------------------------------------- the sandbox on its own

# a child that installs the sandbox, then tries things: out[name] = "ok" or "errno=N"
ATTEMPTS = textwrap.dedent('''
    import ctypes, json, os, signal, subprocess, sys, threading
    from astra_sglang.harness.shared import sandbox
    out = {"level": sandbox.install()}

    def attempt(name, action):
        try:
            action()
            out[name] = "ok"
        except OSError as e:
            out[name] = f"errno={e.errno}"

    attempt("write scratch", lambda: open(os.path.join(os.environ["TMPDIR"], "f"), "w").write("x"))
''')
PROBE = ATTEMPTS + textwrap.dedent('''
    attempt("write outside", lambda: open(sys.argv[1], "a").write("x"))
    attempt("exec /bin/sh", lambda: subprocess.run(["/bin/sh", "-c", "true"], check=True))
    attempt("exec python", lambda: subprocess.run([sys.executable, "-c", "pass"], check=True))
    attempt("kill parent", lambda: os.kill(os.getppid(), 0))
    attempt("kill self", lambda: os.kill(os.getpid(), 0))
    attempt("signal own thread", lambda: signal.pthread_kill(threading.main_thread().ident, 0))
    attempt("read parent memory", lambda: open(f"/proc/{os.getppid()}/mem", "rb").close())
    t = threading.Thread(target=lambda: out.__setitem__("thread", "ok"))
    t.start()
    t.join()
    print(json.dumps(out))
''')


def _probe(tmp_path: Path, env: dict[str, str], code: str = PROBE, *args: str) -> dict[str, str]:
    scratch = sandbox.make_scratch()
    try:
        full = {**os.environ, **sandbox.worker_env(scratch), **env, "PYTHONPATH": str(REPO)}
        done = subprocess.run([sys.executable, "-c", code, *args], env=full, capture_output=True, text=True,
                              timeout=300, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@needs_landlock
def test_the_sandbox_allows_what_a_worker_needs_and_refuses_the_rest(tmp_path):
    outside = tmp_path / "judge_file"
    outside.write_text("judge")
    out = _probe(tmp_path, {SANDBOX_ENV: "1"}, PROBE, str(outside))
    assert out["level"] == "landlock+seccomp", out
    assert out["write scratch"] == out["exec python"] == out["kill self"] == out["signal own thread"] == "ok", out
    assert out["thread"] == "ok", out
    assert out["write outside"] == "errno=13" and out["exec /bin/sh"] == "errno=13", out
    assert out["kill parent"] == "errno=1", out
    # Landlock's ptrace scoping: the judge's memory cannot be opened, even by a worker running as root (the H200);
    # under seccomp alone it can (measured as root here, 2026-12-05), which docs/harness.md says
    assert out["read parent memory"] == "errno=13", out
    assert outside.read_text() == "judge"


def test_a_missing_landlock_is_reported_not_assumed(tmp_path):
    code = ("import json; from astra_sglang.harness.shared import sandbox; sandbox.landlock_abi = lambda: 0; "
            "print(json.dumps({'level': sandbox.install()}))")
    assert _probe(tmp_path, {}, code)["level"] == ("seccomp only: landlock: Landlock not available on this kernel")
    off = _probe(tmp_path, {SANDBOX_ENV: "0"}, code)["level"]
    assert off == f"none: switched off ({SANDBOX_ENV}=0)"
    code = "import json; from astra_sglang.harness.shared import sandbox; print(json.dumps({'level': sandbox.install()}))"
    assert _probe(tmp_path, {SCRATCH_ENV: ""}, code)["level"].startswith("none: no scratch folder given")



def test_a_gpu_worker_gets_seccomp_and_read_only_mounts_by_default_and_says_why(tmp_path):
    """Landlock made CUDA's initialisation fail on the H200 (error 304): the judge's worker on a GPU runs under
    seccomp and the read-only mounts unless Landlock is asked for, and its level says why Landlock is off (not as
    a user's choice)."""
    gpu = sandbox.worker_env(tmp_path, "cuda")
    assert gpu[sandbox.DEVICE_ENV] == "cuda"
    layers, why = sandbox.wanted_layers(gpu)
    assert layers == ["seccomp", "mounts"] and why == f"landlock: {sandbox.GPU_LANDLOCK_OFF}"
    assert sandbox.wanted_layers({**gpu, SANDBOX_ENV: "1"}) == (["landlock", "seccomp"], "")
    assert sandbox.wanted_layers({**gpu, SANDBOX_ENV: "landlock"})[0] == ["landlock"]
    assert sandbox.wanted_layers({**gpu, SANDBOX_ENV: "mounts+seccomp"})[0] == ["seccomp", "mounts"]
    assert sandbox.wanted_layers({**gpu, SANDBOX_ENV: "0"})[0] == []
    assert sandbox.wanted_layers(sandbox.worker_env(tmp_path))[0] == ["landlock", "seccomp"]


LEVEL = "import json; from astra_sglang.harness.shared import sandbox; print(json.dumps({'level': sandbox.install()}))"


def test_the_gpu_level_a_worker_reports_names_the_gpu_rule(tmp_path):
    level = _probe(tmp_path, {sandbox.DEVICE_ENV: "cuda"}, LEVEL)["level"]
    if os.geteuid() == 0:
        assert level == f"seccomp+mounts: landlock: {sandbox.GPU_LANDLOCK_OFF}", level
    else:
        assert level == (f"seccomp only: mounts: {sandbox.MOUNTS_NEED_ROOT}; landlock: {sandbox.GPU_LANDLOCK_OFF}"), level
    as_user = "import os; os.geteuid = lambda: 1000; " + LEVEL
    level = _probe(tmp_path, {sandbox.DEVICE_ENV: "cuda"}, as_user)["level"]
    assert level.startswith(f"seccomp only: mounts: {sandbox.MOUNTS_NEED_ROOT}"), level


ROOT_WRITES = ATTEMPTS + textwrap.dedent('''
    attempt("write the judge's file", lambda: open(sys.argv[1], "a").write("x"))
    attempt("plant a file", lambda: open(sys.argv[1] + ".planted", "w").write("x"))
    attempt("open a disk", lambda: open(sys.argv[2], "rb").close())
    attempt("write a sysctl", lambda: open("/proc/sys/vm/drop_caches", "w").write("3"))
    attempt("write /dev/null", lambda: open("/dev/null", "w").write("x"))
    attempt("name its own thread", lambda: open(f"/proc/self/task/{os.getpid()}/comm", "w").write("w"))
    libc = ctypes.CDLL(None, use_errno=True)
    out["undo: unshare"] = "ok" if libc.unshare(0x20000) == 0 else f"errno={ctypes.get_errno()}"
    out["left"] = sandbox.writable_mounts("self", [os.environ["ASTRA_SGLANG_SANDBOX_SCRATCH"], "/dev/"])
    out["judge sees"] = sandbox.left_writable(os.getpid(), os.environ)
    print(json.dumps(out))
''')


def test_mounts_that_cannot_be_listed_are_not_claimed_read_only(tmp_path):
    """With no /proc/self/mountinfo (a sandboxed kernel) the remount loop would see nothing, remount nothing, and
    find nothing writable: the layer must say it is not in force instead."""
    code = ("import json; from astra_sglang.harness.shared import sandbox; sandbox.mounts = lambda pid='self': []; "
            "print(json.dumps({'level': sandbox.install()}))")
    level = _probe(tmp_path, {SANDBOX_ENV: "seccomp+mounts"}, code)["level"]
    if os.geteuid() == 0:
        assert level.startswith("seccomp only: mounts: cannot list the mounts"), level
    else:
        assert level.startswith(f"seccomp only: mounts: {sandbox.MOUNTS_NEED_ROOT}"), level


def _a_disk() -> str | None:
    return next((d for d in ("/dev/vda", "/dev/sda", "/dev/nvme0n1", "/dev/xvda") if os.path.exists(d)), None)


@pytest.mark.skipif(os.geteuid() != 0, reason="the mounts layer is for root workers (the H200 runs as root)")
def test_a_root_gpu_worker_cannot_write_what_root_owns(tmp_path):
    """A GPU worker runs without Landlock (CUDA does not start under it), as root on the H200. Giving up its
    capabilities is not enough: a uid-0 process without any still writes every file root owns by its owner bits,
    the judge's Triton cache, the op folder, the harness's modules, the queue's results among them (measured here
    before this layer: the write went through), opens a disk for writing and sets sysctls. In its own mount
    namespace it sees every file system read-only but its scratch folder and the device files it needs."""
    judges = tmp_path / "judge_file"
    judges.write_text("judge")
    disk = _a_disk() or "/dev/null"
    out = _probe(tmp_path, {sandbox.DEVICE_ENV: "cuda"}, ROOT_WRITES, str(judges), disk)
    assert out["level"] == f"seccomp+mounts: landlock: {sandbox.GPU_LANDLOCK_OFF}", out
    assert out["write the judge's file"] == out["plant a file"] == "errno=30", out  # EROFS
    assert out["write a sysctl"] == "errno=30", out
    if disk != "/dev/null":
        assert out["open a disk"] == "errno=13", out  # /dev is nodev but for the bound device files
    assert out["write scratch"] == out["write /dev/null"] == out["name its own thread"] == "ok", out
    assert out["undo: unshare"] == "errno=1", out  # seccomp, and no capability left
    assert out["left"] == [] and out["judge sees"] == [], out
    assert judges.read_text() == "judge" and not (tmp_path / "judge_file.planted").exists()
    assert sandbox.left_writable(os.getpid(), {}) != []  # outside the namespace the same check sees "/" writable
    assert sandbox.left_writable(2**22 + 7, {})[0].startswith("/ (unverified")  # no mountinfo: never "read-only"
    control = _probe(tmp_path, {SANDBOX_ENV: "seccomp"}, ROOT_WRITES, str(judges), disk)
    assert control["write the judge's file"] == "ok", control  # seccomp and no capabilities alone: the hole
    assert judges.read_text() == "judgex"


SETNAME = textwrap.dedent('''
    import ctypes, json, os, sys, threading
    from astra_sglang.harness.shared import sandbox
    level = sandbox.install()
    libc = ctypes.CDLL(None, use_errno=True)
    done = threading.Event()
    t = threading.Thread(target=done.wait)
    t.start()
    own = libc.pthread_setname_np(ctypes.c_ulong(t.ident), b"cuda-EvtHandlr")
    done.set()
    t.join()
    try:  # another process's threads stay out of reach
        open(f"/proc/{os.getppid()}/task/{os.getppid()}/comm", "w").write("x")
        other = "ok"
    except OSError as e:
        other = f"errno={e.errno}"
    print(json.dumps({"level": level, "own": own, "other": other}))
''')


@needs_landlock
def test_a_sandboxed_worker_may_name_its_own_threads_as_the_cuda_driver_does(tmp_path):
    """The CUDA driver names the threads it starts (pthread_setname_np: a write to /proc/self/task/<tid>/comm).
    Landlock refused that write (EACCES, measured here) and CUDA's initialisation failed on the H200 with error
    304 under Landlock alone; with every path writable it ran (probe, 2026-12-05)."""
    out = _probe(tmp_path, {SANDBOX_ENV: "1"}, SETNAME)
    assert out["level"].startswith("landlock+seccomp"), out
    assert out["own"] == 0, out
    assert out["other"] == "errno=13", out


@pytest.mark.gpu
def test_cuda_starts_inside_both_layers(tmp_path):
    """What would let a GPU worker run under Landlock again (its default is seccomp and the mounts: wanted_layers)."""
    code = ("import json; from astra_sglang.harness.shared import sandbox; level = sandbox.install(); import torch; "
            "print(json.dumps({'level': level, 'sum': float(torch.ones(4, device='cuda').sum())}))")
    out = _probe(tmp_path, {SANDBOX_ENV: "1", sandbox.DEVICE_ENV: "cuda"}, code)
    assert out["level"].startswith("landlock+seccomp") and out["sum"] == 4.0, out


@pytest.mark.gpu
def test_cuda_starts_in_the_default_gpu_sandbox(tmp_path):
    """The worker's default on a GPU (seccomp, the read-only mounts as root, no capabilities) must let the driver
    start; the device scripts fall back one layer where it does not (sandbox_probe.py)."""
    code = ("import json; from astra_sglang.harness.shared import sandbox; level = sandbox.install(); import torch; "
            "print(json.dumps({'level': level, 'sum': float(torch.ones(4, device='cuda').sum())}))")
    out = _probe(tmp_path, {sandbox.DEVICE_ENV: "cuda"}, code)
    layers = "seccomp+mounts" if os.geteuid() == 0 else "seccomp only"
    assert out["level"].startswith(layers) and out["sum"] == 4.0, out


UNDUMPABLE_PARENT = textwrap.dedent('''
    import ctypes, subprocess, sys
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0, as the judge makes itself
    child = """
    import json, os
    from astra_sglang.harness.shared import sandbox
    level = sandbox.install()
    try:
        open(f"/proc/{os.getppid()}/mem", "rb").close()
        mem = "ok"
    except OSError as e:
        mem = f"errno={e.errno}"
    print(json.dumps({"level": level, "mem": mem, "caps": sandbox.capabilities()}))
    """
    done = subprocess.run([sys.executable, "-c", child], capture_output=True,
                          text=True)
    sys.stdout.write(done.stdout or done.stderr)
''')


@pytest.mark.skipif(os.geteuid() != 0, reason="as a user without capabilities the judge's memory is closed anyway")
def test_without_landlock_a_root_worker_still_cannot_read_the_judges_memory(tmp_path):
    """The seccomp layer (alone on a GPU) gives up every capability: as root with CAP_SYS_PTRACE the worker opened
    its undumpable judge's /proc/<pid>/mem (the secret choosing which timed replay is checked lives there);
    without any capability the kernel refuses it. ASTRA_SGLANG_SANDBOX_KEEP_CAPS=1 keeps them (the control)."""
    out = _probe(tmp_path, {SANDBOX_ENV: "seccomp"}, UNDUMPABLE_PARENT)
    assert out["level"] == f"seccomp only: switched to seccomp ({SANDBOX_ENV})", out
    assert out["caps"] == 0 and out["mem"] == "errno=13", out
    kept = _probe(tmp_path, {SANDBOX_ENV: "seccomp", sandbox.KEEP_CAPS_ENV: "1"}, UNDUMPABLE_PARENT)
    assert kept["level"].endswith(f"capabilities kept ({sandbox.KEEP_CAPS_ENV}=1)") and kept["caps"], kept
    assert kept["mem"] == "ok", kept

TRITON_BUILD = textwrap.dedent('''
    import json
    from astra_sglang.harness.shared import sandbox
    level = sandbox.install()
    from triton.runtime.build import compile_module_from_src
    src = """#include <Python.h>
    static PyObject* f(PyObject* s, PyObject* a) { return PyLong_FromLong(42); }
    static PyMethodDef m[] = {{"f", f, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
    static struct PyModuleDef d = {PyModuleDef_HEAD_INIT, "astra_sandbox_probe", NULL, -1, m};
    PyMODINIT_FUNC PyInit_astra_sandbox_probe(void) { return PyModule_Create(&d); }
    """
    mod = compile_module_from_src(src, "astra_sandbox_probe")
    print(json.dumps({"level": level, "f": mod.f(), "file": mod.__file__}))
''')


@needs_landlock
def test_tritons_c_compiler_runs_inside_the_sandbox(tmp_path):
    """On the GPU, Triton builds its driver and launcher stubs with the C compiler at a kernel's first launch
    (gcc -> cc1, as, collect2, ld) and runs ptxas: the exec rules must let that through (here: the C half)."""
    pytest.importorskip("triton")
    if shutil.which("gcc") is None and shutil.which("clang") is None:
        pytest.skip("no C compiler")
    out = _probe(tmp_path, {}, TRITON_BUILD)
    assert out["level"] == "landlock+seccomp" and out["f"] == 42, out
    assert "/triton/cache/" in out["file"], out  # the worker's own Triton cache, in its scratch folder


CUDA_CACHED = textwrap.dedent('''
    import json, sys
    from pathlib import Path
    from astra_sglang.harness.shared import sandbox
    level = sandbox.install()
    from astra_sglang.contract.op import load_manifest
    from astra_sglang.loader.cuda_build import CudaBuildSpec
    op = Path(sys.argv[1])
    built = CudaBuildSpec.from_recipe(op, load_manifest(op), "float32", cache_dir=Path(sys.argv[2])).build(load=False)
    print(json.dumps({"level": level, "cached": built.report.cached}))
''')


@needs_landlock
@pytest.mark.nvcc
def test_a_cuda_module_the_parent_built_is_found_by_a_worker_that_cannot_write_the_cache(tmp_path):
    """The worker loads the CUDA module the parent built from a cache it may not write (its lock file opened
    read-only; ``nvcc --version``, part of the cache key, runs from CUDA_HOME/bin)."""
    from astra_sglang.contract.op import load_manifest
    from astra_sglang.loader.cuda_build import CudaBuildSpec

    op, cache = make_h_scale(tmp_path), tmp_path / "cache"
    CudaBuildSpec.from_recipe(op, load_manifest(op), "float32", cache_dir=cache).build(load=False)
    out = _probe(tmp_path, {}, CUDA_CACHED, str(op), str(cache))
    assert out == {"level": "landlock+seccomp", "cached": True}, out


# ------------------------------------------------------------------------------- the seccomp filter's logic


def _run_bpf(prog: list[tuple[int, int, int, int]], data: bytes) -> int:
    """The classic-BPF subset the filter uses (LD W ABS, JEQ/JGE K, RET K) on one ``seccomp_data``."""
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        if code == 0x20:
            acc = int.from_bytes(data[k:k + 4], "little")
            pc += 1
        elif code in (0x15, 0x35):
            taken = acc == k if code == 0x15 else acc >= k
            pc += 1 + (jt if taken else jf)
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected BPF code {code:#x}")


def _call(machine: str, name: str, *args: int, arch: int | None = None) -> bytes:
    nr = sandbox._NR[name][0 if machine == "x86_64" else 1] if name in sandbox._NR else 0
    a = [x & 0xFFFFFFFFFFFFFFFF for x in args] + [0] * (6 - len(args))
    return (nr.to_bytes(4, "little") + (arch or sandbox._AUDIT_ARCH[machine]).to_bytes(4, "little") + bytes(8)
            + b"".join(x.to_bytes(8, "little") for x in a))


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_seccomp_filter_denies_other_processes_and_allows_the_worker_itself(machine):
    me, judge = 4242, 4241
    prog = sandbox.seccomp_program(me, machine)
    assert len(prog) < 4096 and all(jt < 256 and jf < 256 for _, jt, jf, _ in prog)
    allow, eperm = 0x7FFF0000, 0x00050001

    def verdict(name: str, *args: int, arch: int | None = None) -> int:
        return _run_bpf(prog, _call(machine, name, *args, arch=arch))

    for name in sandbox.DENIED:
        assert verdict(name, me, 0) == eperm, name
    assert sorted(set(sandbox.DENIED) | set(sandbox.SELF_ONLY)) == sorted(sandbox._NR)
    for args in [(me, 9), (me | (1 << 32), 0)]:
        assert verdict("kill", *args) == allow
    for args in [(judge, 9), (0, 9), (-1, 9), (-me, 9)]:
        assert verdict("kill", *args) == eperm, args
    assert verdict("tgkill", me, 4243, 10) == allow  # a thread of its own
    assert verdict("tgkill", judge, judge, 9) == eperm
    assert verdict("tkill", judge, 9) == eperm
    assert verdict("rt_sigqueueinfo", judge, 9, 0) == eperm
    assert verdict("setpriority", 0, 0, 5) == allow and verdict("setpriority", 0, me, 5) == allow
    assert verdict("setpriority", 0, judge, 19) == eperm
    assert verdict("setpriority", 2, 0, 19) == eperm  # PRIO_USER: every process of the user
    assert verdict("ioprio_set", 1, 0, 0) == allow and verdict("ioprio_set", 1, judge, 0) == eperm
    assert verdict("sched_setaffinity", 0, 8, 0) == allow and verdict("sched_setaffinity", judge, 8, 0) == eperm
    assert verdict("prlimit64", 0, 7, 0, 0) == allow and verdict("prlimit64", judge, 7, 0, 0) == eperm
    for name in ("mount", "ptrace"):
        assert verdict(name, 0, 0, arch=0x40000003) == eperm  # a foreign architecture (i386): denied whole
    assert _run_bpf(prog, _call(machine, "read")) == allow  # everything else, fork and exec included
    if machine == "x86_64":
        x32 = (sandbox._NR["kill"][0] | 0x40000000).to_bytes(4, "little") + _call(machine, "kill", me, 0)[4:]
        assert _run_bpf(prog, x32) == eperm


@needs_landlock
def test_a_candidate_cannot_read_the_heldout_secret(setting, tmp_path, monkeypatch):
    """The secret behind the held-out shapes, given both ways (the variable and the file), reaches neither the
    judge's environment nor the worker's files: the cheat, wrong from the moment it finds it, stays right."""
    config = tmp_path / "config"
    (config / "astra-sglang").mkdir(parents=True)
    (config / "astra-sglang" / "heldout.key").write_bytes(b"0123456789abcdef")
    (config / "other.txt").write_text("a neighbour of the secret's folder stays readable")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    monkeypatch.setenv("ASTRA_SGLANG_HELDOUT_SECRET", "fedcba9876543210")
    r = evaluate(setting.op, CHEATS / "reads_the_heldout_secret.py", CPU)
    assert setting.lines("reads_the_heldout_secret") == ["file denied errno=13"]
    assert r.ok, r.model_dump_json(indent=1)[:3000]
    monkeypatch.setenv(SANDBOX_ENV, "0")  # the control: the file is the only way left, and it is the attack
    r = evaluate(setting.op, CHEATS / "reads_the_heldout_secret.py", CPU)
    assert setting.lines("reads_the_heldout_secret")[-1] == "file"
    failure = r.correctness.first_failure if r.correctness is not None else None
    assert not r.ok and failure is not None and failure.reason == "mismatch", r.model_dump_json(indent=1)[:2000]


@pytest.mark.skipif(os.geteuid() != 0, reason="the mounts layer is for root workers (the H200 runs as root)")
def test_a_gpu_worker_cannot_read_the_heldout_secret_either(setting, tmp_path, monkeypatch):
    """Where Landlock is off (a GPU) the read-only mounts put an empty folder over the secret's: the same cheat
    finds no file and stays right; the judge saw the folder covered (no note in the level)."""
    config = tmp_path / "config"
    (config / "astra-sglang").mkdir(parents=True)
    (config / "astra-sglang" / "heldout.key").write_bytes(b"0123456789abcdef")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    monkeypatch.setenv(SANDBOX_ENV, "seccomp+mounts")
    r = evaluate(setting.op, CHEATS / "reads_the_heldout_secret.py", CPU)
    assert setting.lines("reads_the_heldout_secret") == ["file denied errno=2"]
    assert r.ok, r.model_dump_json(indent=1)[:3000]
    assert r.sandbox == f"seccomp+mounts: switched to seccomp+mounts ({SANDBOX_ENV})", r.sandbox
    assert (config / "astra-sglang" / "heldout.key").read_bytes() == b"0123456789abcdef"


@needs_landlock
def test_only_the_secrets_folder_is_hidden(tmp_path):
    config = tmp_path / "config"
    (config / "astra-sglang").mkdir(parents=True)
    (config / "astra-sglang" / "heldout.key").write_bytes(b"k")
    (config / "other.txt").write_text("x")
    code = textwrap.dedent('''
        import json, sys
        from astra_sglang.harness.shared import sandbox
        out = {"level": sandbox.install()}
        for name, path in (("secret", sys.argv[1]), ("neighbour", sys.argv[2]), ("etc", "/etc/hostname")):
            try:
                open(path, "rb").read()
                out[name] = "ok"
            except OSError as e:
                out[name] = f"errno={e.errno}"
        print(json.dumps(out))
    ''')
    out = _probe(tmp_path, {"XDG_CONFIG_HOME": str(config)}, code, str(config / "astra-sglang" / "heldout.key"),
                 str(config / "other.txt"))
    assert out == {"level": "landlock+seccomp", "secret": "errno=13", "neighbour": "ok", "etc": "ok"}, out


def test_the_worker_is_told_where_libcuda_is_since_it_may_not_run_a_script_ldconfig(tmp_path, monkeypatch):
    """Triton finds libcuda with `/sbin/ldconfig -p` at its first launch; on Ubuntu that is a shell script, which
    the sandbox refuses to run: the judge asks ldconfig itself and hands the worker TRITON_LIBCUDA_PATH."""
    import subprocess as sp

    seen: list[list[str]] = []

    def fake_run(args, **kw):
        seen.append(list(args))
        return sp.CompletedProcess(args, 0, stdout="\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/"
                                   "libcuda.so.1\n\tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6\n")

    monkeypatch.delenv("TRITON_LIBCUDA_PATH", raising=False)
    monkeypatch.setattr(sp, "run", fake_run)
    env = sandbox.worker_env(tmp_path)
    assert env["TRITON_LIBCUDA_PATH"] == "/usr/lib/x86_64-linux-gnu" and seen == [["/sbin/ldconfig", "-p"]]
    monkeypatch.setattr(sp, "run", lambda args, **kw: sp.CompletedProcess(args, 0, stdout=""))
    assert "TRITON_LIBCUDA_PATH" not in sandbox.worker_env(tmp_path)  # a CPU host: nothing to say


@pytest.mark.skipif(os.geteuid() != 0, reason="the mounts layer is for root workers (the H200 runs as root)")
def test_the_device_probe_falls_back_one_layer_when_the_driver_needs_more(tmp_path):
    """scripts/device/sandbox_probe.py decides each device call's worker sandbox before any evaluation: nothing when
    the default starts, else the shell line of the first weaker setting that does (never a failed call, as under
    Landlock on 2026-12-05). A stand-in for the driver's start: a write outside the scratch folder."""
    script = REPO / "scripts" / "device" / "sandbox_probe.py"
    outside = tmp_path / "driver_state"

    def run(check: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(REPO), "ASTRA_SGLANG_PROBE_CHECK": check}
        env.pop(SANDBOX_ENV, None)
        return subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)

    ok = run("pass")
    assert ok.returncode == 0 and ok.stdout == "", ok
    assert "seccomp+mounts" in ok.stderr, ok.stderr
    assert f"kernel {platform.release()}, Landlock ABI" in ok.stderr, ok.stderr  # which machine said so
    needs_writes = run(f"open({str(outside)!r}, 'w').write('x')")
    assert needs_writes.returncode == 0, needs_writes
    assert needs_writes.stdout.strip() == f"export {SANDBOX_ENV}=seccomp", needs_writes
    never = run("raise SystemExit(3)")
    assert never.returncode == 1 and never.stdout == "", never


def test_a_compiler_under_its_own_prefix_may_run_its_own_programs_and_its_interpreter(tmp_path, monkeypatch):
    """The H100 image's gcc is /opt/gcc/bin/gcc: inside Landlock the worker was refused it ("Permission denied:
    '/opt/gcc/bin/gcc'", 2026-12-05), as the policy knew only /usr's gcc programs. A compiler's own prefix
    (libexec/gcc, lib/gcc) and, for a wrapper script, its interpreter are now the toolchain; /usr's whole bin is not."""
    from astra_sglang.harness.shared import sandbox

    prefix = tmp_path / "opt" / "gcc"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "libexec" / "gcc" / "x86_64-linux-gnu" / "13").mkdir(parents=True)
    gcc = prefix / "bin" / "gcc"
    gcc.write_text("#!/bin/sh\nexec \"$0-13\" \"$@\"\n")
    gcc.chmod(0o755)
    monkeypatch.setenv("CC", str(gcc))
    allowed = sandbox._toolchain()
    assert Path(os.path.realpath(gcc)) in allowed and Path(os.path.realpath(prefix / "libexec" / "gcc")) in allowed
    assert Path(os.path.realpath("/bin/sh")) in allowed
    assert Path("/usr/bin") not in allowed and Path("/usr") not in allowed
    assert sandbox._compiler_own(Path("/usr/bin/gcc")) in ([], [Path("/bin/sh")])  # /usr's gcc: nothing of /usr


def test_binutils_in_the_compilers_prefix_may_run_too(tmp_path, monkeypatch):
    """With gcc's own programs allowed, the Landlock probe on the H100 still failed at Triton's launcher build
    ("CalledProcessError: ... /opt/gcc/bin/gcc ...", 2026-12-05): a gcc built with its binutils in the same
    prefix runs <prefix>/<triplet>/bin/as and ld, which were not the toolchain."""
    from astra_sglang.harness.shared import sandbox

    prefix = tmp_path / "opt" / "gcc"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "x86_64-pc-linux-gnu" / "bin").mkdir(parents=True)
    gcc = prefix / "bin" / "gcc"
    gcc.write_bytes(b"\x7fELF")
    gcc.chmod(0o755)
    monkeypatch.setenv("CC", str(gcc))
    assert Path(os.path.realpath(prefix / "x86_64-pc-linux-gnu" / "bin")) in sandbox._toolchain()


def test_a_wrapper_compiler_may_run_the_real_one_beside_it(tmp_path, monkeypatch):
    """With its prefix and binutils allowed, the Landlock probe on the H100 still died at Triton's launcher build:
    "/opt/gcc/bin/gcc: 2: exec: /opt/gcc/bin/gcc-real: Permission denied" (2026-12-05). The image's gcc is a
    script that execs the real compiler from its own bin folder; that folder (under the compiler's own prefix,
    never /usr/bin) is the toolchain too."""
    from astra_sglang.harness.shared import sandbox

    prefix = tmp_path / "opt" / "gcc"
    (prefix / "bin").mkdir(parents=True)
    gcc = prefix / "bin" / "gcc"
    gcc.write_text('#!/bin/sh\nexec /opt/gcc/bin/gcc-real "$@"\n')
    gcc.chmod(0o755)
    (prefix / "bin" / "gcc-real").write_bytes(b"\x7fELF")
    monkeypatch.setenv("CC", str(gcc))
    assert Path(os.path.realpath(prefix / "bin")) in sandbox._toolchain()
    assert Path("/usr/bin") not in sandbox._compiler_own(Path("/usr/bin/gcc"))


def test_a_compiler_in_usr_local_gets_the_programs_named_after_it_not_the_whole_bin(monkeypatch):
    """/usr/local/bin holds every program installed under /usr/local: a gcc there gets its gcc-* siblings (the
    wrapper's real compiler), not the folder."""
    from astra_sglang.harness.shared import sandbox

    bin_dir = Path("/usr/local/bin")
    real = bin_dir / "gcc"
    siblings = [bin_dir / "gcc-real", bin_dir / "python3"]
    monkeypatch.setattr(sandbox.os.path, "realpath", lambda p: str(p))
    monkeypatch.setattr(Path, "glob", lambda self, pattern: iter(
        [p for p in siblings if p.name.startswith("gcc") and self == bin_dir]))
    monkeypatch.setattr(Path, "is_file", lambda self: self in siblings)
    own = sandbox._compiler_own(real)
    assert bin_dir / "gcc-real" in own
    assert bin_dir not in own and bin_dir / "python3" not in own
