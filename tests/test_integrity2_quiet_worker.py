"""The candidate cannot slow the original it is compared with (issue 22, attack class 4): while the judge times
anything of its own (the warm-up, each ABBA batch of the original/baseline, the long wall-clock batch) the
worker's whole process group is stopped, and it is continued afterwards.

The adversarial candidate (tests/candidates/merge_state/cheats/loads_machine_while_original_is_timed.py, ours)
starts a thread and a helper process that stamp ``time.monotonic_ns()`` into a file about every millisecond;
the judge writes its timing windows through the ``ASTRA_SGLANG_DEBUG_WINDOWS`` test hook. ``time.monotonic``
is system-wide on Linux, so the two compare: no stamp may fall inside a window. On CPU (TRITON_INTERPRET=1,
simulated timing); the GPU half (queued GPU work seen through NVML) is ``gpu``-marked.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from h_fixtures.ops import make_h_merge

from astra_sglang.contract.eval_config import EvalConfig
from astra_sglang.harness import evaluate
from astra_sglang.harness.judge.session import NVML_WATCH_ENV
from astra_sglang.harness.judge.timed import DEBUG_WINDOWS_ENV
from astra_sglang.harness.shared.isolation import Child, GpuWatch, all_stopped, group_tasks
from astra_sglang.harness.shared.sandbox import WRITABLE_ENV

REPO = Path(__file__).resolve().parent.parent
MS = REPO / "tests" / "candidates" / "merge_state"
LOADER = MS / "cheats" / "loads_machine_while_original_is_timed.py"
STAMPS_ENV = "ASTRA_TEST_QUIET_STAMPS"
# unscreened: the screen refuses the candidate's threading/subprocess imports before anything runs
SIM = EvalConfig(shapes="test", dtypes=["bfloat16"], device="cpu", timeout_s=120, seed=4321, screen=False,
                 simulate_timing=True, warmup=2, rep=8, max_graph_launches=3, distributions=["normal"])


@pytest.fixture(scope="module")
def merge_op(tmp_path_factory) -> Path:
    return make_h_merge(tmp_path_factory.mktemp("ops"))


def _windows(path: Path) -> list[tuple[int, int, str]]:
    out = []
    for line in path.read_text().splitlines():
        t0, t1, label = line.split(" ", 2)
        out.append((int(t0), int(t1), label))
    return out


def _stamps(path: Path) -> list[tuple[int, int]]:
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and all(p.isdigit() for p in parts):
            out.append((int(parts[0]), int(parts[1])))
    return out


def test_nothing_of_the_candidate_runs_while_the_judge_times_the_original(merge_op, tmp_path, monkeypatch):
    stamps, windows = tmp_path / "stamps", tmp_path / "windows"
    monkeypatch.setenv(STAMPS_ENV, str(stamps))
    monkeypatch.setenv(WRITABLE_ENV, str(tmp_path))  # the candidate's stamps: its sandbox lets it write only there
    monkeypatch.setenv(DEBUG_WINDOWS_ENV, str(windows))
    r = evaluate(merge_op, LOADER, SIM)
    # the verdict is produced normally: the worker was continued after every window
    assert r.correctness is not None and r.correctness.ok, r.model_dump_json(indent=1)[:3000]
    assert r.timing is not None and r.timing.shapes, r.model_dump_json(indent=1)[:3000]
    w = _windows(windows)
    labels = {label.split()[0] for _, _, label in w}
    assert {"warm-up", "batch", "wall-clock"} <= labels, labels
    s = _stamps(stamps)
    assert len({pid for _, pid in s}) >= 2, "the thread and the helper process both stamped"  # the attack ran
    assert any(t > w[-1][1] for t, _ in s), "the load was continued after the last window"
    inside = [(t, pid, label) for t, pid in s for t0, t1, label in w if t0 <= t <= t1]
    assert inside == [], f"{len(inside)} stamps of the candidate inside the judge's timing windows: {inside[:5]}"


def test_a_plain_correct_candidate_still_passes_and_is_timed(merge_op, tmp_path, monkeypatch):
    monkeypatch.setenv(DEBUG_WINDOWS_ENV, str(tmp_path / "windows"))
    r = evaluate(merge_op, MS / "h_correct.py", SIM)
    assert r.ok and r.timing is not None and r.timing.shapes, r.model_dump_json(indent=1)[:3000]
    assert _windows(tmp_path / "windows")


SLEEPER = '''"""A child that says hello and sleeps until killed (a stand-in worker)."""
import sys
import time
from multiprocessing.connection import Connection

Connection(int(sys.argv[2]), readable=False).send_bytes(b"up")
while True:
    time.sleep(0.01)
'''


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_the_worker_is_stopped_in_the_body_and_continued_even_when_the_body_raises(tmp_path):
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    with Child("sleeper", device="cpu", name="stand-in", env_extra=env) as child:
        assert child.recv_bytes(60) == b"up"
        pid = child.proc.pid
        with pytest.raises(RuntimeError), child.stopped() as ok:
            assert ok and _state(pid) == "T" and all_stopped(group_tasks(pid))
            raise RuntimeError("the judge's timing failed")
        assert _state(pid) != "T"  # continued: a stopped worker would time out the next request
        with child.stopped() as ok:
            assert ok and _state(pid) == "T"
        assert _state(pid) != "T"
        os.kill(pid, signal.SIGSTOP)  # a worker that stops itself is continued as well
        with child.stopped():
            pass
        assert _state(pid) != "T"


class _Nvml:
    """pynvml's calls GpuWatch.open makes, answering with the compute processes ``listed``."""
    NVML_GPU_UTILIZATION_SAMPLES = 1

    def __init__(self, listed: list[int] | None):
        self.listed = listed

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        return uuid

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list:
        if self.listed is None:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return [type("P", (), {"pid": p, "usedGpuMemory": 1})() for p in self.listed]

    def nvmlDeviceGetSamples(self, handle: str, kind: int, since: int) -> tuple:
        return 0, [type("S", (), {"timeStamp": t})() for t in (0, 100_000, 200_000)]


def test_an_nvml_that_does_not_list_the_worker_is_no_watch_and_says_so():
    """The H100 device's NVML listed no compute process (2026-12-07): a watch there saw the worker quiet while its
    queued matmuls ran beside the judge's timing. Only an NVML that lists the worker watches it."""
    watch, why = GpuWatch.open(4242, "abc", nvml=_Nvml([4242, 7]))
    assert watch is not None and watch.pid == 4242 and watch.period_us == 100_000 and why == ""
    for listed, says in (([], "does not list the worker (pid 4242)"), ([7], "does not list the worker"),
                         (None, "does not list this GPU's compute processes")):
        watch, why = GpuWatch.open(4242, "abc", nvml=_Nvml(listed))
        assert watch is None and says in why, why


@pytest.mark.gpu
@pytest.mark.gpu_timing
@pytest.mark.timeout(300)
def test_gpu_work_queued_before_the_stop_makes_the_timing_suspect(tmp_path, monkeypatch, restored_op):
    """On the H200: the candidate's thread keeps the GPU queue full; SIGSTOP stops the thread, not the queue.
    With NVML that lists the worker the shape is suspect for its GPU work; without NVML, or with one that does
    not list the worker (the H100 device VM), a note says the queue is not watched and it is still never a win.
    One timed shape, one dtype, few reps: every launch of the judge waits behind the flood's 12-ms matmuls and
    every batch waits (bounded, 2 s) for a quiet GPU, so the full paper set ran past a 470-s call (2026-12-06)."""
    monkeypatch.setenv("ASTRA_TEST_QUIET_GPU", "1")
    monkeypatch.setenv(NVML_WATCH_ENV, "1")  # opt-in until it has run on a GPU (checks.NVML_WATCH_ENV)
    cand = MS / "cheats" / "queues_gpu_work_while_original_is_timed.py"
    cfg = EvalConfig(shapes="paper", dtypes=["bfloat16"], timing_dtypes=["bfloat16"], distributions=["normal"],
                     check_all_shapes=False, stateful_checks=0, max_timed_shapes=1, warmup=3, rep=10,
                     time_baselines=False, screen=False, max_wall_s=240)
    r = evaluate(restored_op("merge_state"), cand, cfg)
    assert r.correctness is not None and r.correctness.ok and r.timing is not None, r.error
    if any("not watched" in n for n in r.correctness.notes):  # no pynvml, or an NVML blind to the worker
        # (the H100 device, 2026-12-07): said so, and the flood is still never a win (the wall-clock check)
        assert all(s.verdict != "faster" for s in r.timing.shapes), r.timing
        return
    assert all(s.verdict == "suspect" for s in r.timing.shapes), r.timing
    assert all("GPU work" in s for s in r.timing.suspect), r.timing.suspect
