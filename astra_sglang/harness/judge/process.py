"""The trusted checker process (the judge): ``python -m astra_sglang.harness.judge.process RFD WFD``, started by ``evaluate``.

It never imports candidate code. It starts the candidate's worker first (so the worker's imports overlap its
own) in the OS sandbox (``shared/sandbox.py``: the worker writes only to a scratch folder made here for its
caches and temporary files, removed before the verdict is sent), makes itself undumpable (a same-user process
cannot then ptrace it or write its memory through ``/proc``), then decides the verdict (``checker.py``) and
sends it to the parent. The job arrives on a pipe, not a file: held-out cases never touch disk and never reach
the worker.
"""

from __future__ import annotations

import faulthandler
import os
import shutil
import sys
import traceback
from multiprocessing.connection import Connection
from pathlib import Path

from astra_sglang.harness.shared import sandbox
from astra_sglang.harness.shared.isolation import Child, die_with_parent, prctl
from astra_sglang.harness.shared.protocol import (
    CheckerError,
    CheckerMessage,
    CheckJob,
    Progress,
    WorkerJob,
    recv,
    send,
)
from astra_sglang.harness.shared.suite import ELEM_BYTES, row_stride_of, shape_of, span

GUARD_BYTES = 4096  # tensors.GUARD_BYTES, restated so the worker can start before torch is imported here
ALIGN = 4096


def arena_bytes(job: CheckJob) -> int:
    """Room for the largest case or timed shape, at the largest shift the checker places a case at."""
    sig = job.manifest.signature
    dims = [c.dims for c in job.cases] + list(job.timed_shapes)
    dtypes = sorted({c.dtype for c in job.cases} | set(job.timing_dtypes))
    need = 0
    for d in dims:
        for dt in dtypes:
            total = 0
            for t in sig.tensors:
                elem = ELEM_BYTES.get(dt if t.dtype == "{dtype}" else t.dtype, 8)
                # a row-strided input spans its rows, gaps included: counting the view's elements left the
                # arena 0.7 MB short of decode attention's B = 128 case on the H100 (2026-12-06)
                body = -(-span(shape_of(t.shape, d), row_stride_of(job.manifest, t, d)) * elem // 16) * 16
                total += -(-(2 * GUARD_BYTES + body) // ALIGN) * ALIGN
            need = max(need, total)
    return need + 16 * ALIGN


def _undumpable() -> None:
    prctl(4, 0)  # PR_SET_DUMPABLE = 4; not Linux: no /proc/<pid>/mem to protect


def main(argv: list[str]) -> None:
    die_with_parent()
    faulthandler.enable()
    rfd, wfd = int(argv[0]), int(argv[1])
    conn_in, conn_out = Connection(rfd, writable=False), Connection(wfd, readable=False)

    def progress(p: Progress) -> None:
        send(conn_out, CheckerMessage(msg=p))

    worker = None
    sweep = None
    checker = None
    scratch: Path | None = None

    def stop_workers() -> None:
        """Before any verdict leaves: a worker still hung in candidate code is killed (and reaped) first, so no
        candidate process outlives the verdict the parent acts on (also one the checker started in its place);
        then its scratch folder goes (the parent kills this process as soon as it has the verdict)."""
        if worker is not None:
            worker.close()
        if sweep is not None:
            sweep.close()
        if checker is not None and checker.s.worker is not None:
            checker.s.worker.close()
        if scratch is not None:  # the workers are dead: nothing writes there any more
            shutil.rmtree(scratch, ignore_errors=True)

    try:
        job = recv(conn_in, CheckJob)
        progress(Progress(step="started"))
        arena = None
        if job.candidate is not None:
            size = arena_bytes(job)
            fd = os.memfd_create("astra-arena", 0)
            os.ftruncate(fd, -(-size // ALIGN) * ALIGN)
            scratch = sandbox.make_scratch()  # one per judge: its workers run the same candidate
            env = sandbox.worker_env(scratch, job.device)

            def start_worker() -> Child:
                child = Child("astra_sglang.harness.worker", device=job.device, pass_fds=(fd,), env_extra=env)
                child.send(WorkerJob(op_dir=job.op_dir, manifest=job.manifest, candidate=job.candidate,
                                     device=job.device, simulate_timing=job.config.simulate_timing,
                                     cache_dir=str(job.config.cache_dir) if job.config.cache_dir else None,
                                     arch=job.config.arch, arena_bytes=size, variants=job.variants))
                return child

            worker = start_worker()
        _undumpable()
        from astra_sglang.harness.judge.checker import Checker
        from astra_sglang.harness.shared.arena import Arena

        if job.candidate is not None:
            arena = Arena(size, fd)
            if job.device == "cuda":
                arena.pin()
        if job.variants:
            from astra_sglang.harness.judge.sweep_checks import SweepChecker

            assert arena is not None and worker is not None
            sweep = SweepChecker(job, progress, worker, start_worker, arena)
            result = sweep.run()
        else:
            checker = Checker(job, progress, worker, arena, start_worker if job.candidate is not None else None)
            result = checker.run()
        stop_workers()
        send(conn_out, CheckerMessage(msg=result))
    except BaseException as e:  # noqa: BLE001 - report anything, then exit; the parent decides what it means
        stop_workers()
        send(conn_out, CheckerMessage(msg=CheckerError(error=f"{type(e).__name__}: {e}",
                                                   traceback=traceback.format_exc()[-4000:])))
    finally:
        stop_workers()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
