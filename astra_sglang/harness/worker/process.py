"""The candidate worker: the only process that loads candidate code, and all it does is compute.

Started by the judge as ``python -m astra_sglang.harness.worker RFD WFD ARENA_FD`` (``__main__.py``: the OS sandbox
first, then this module). It never sees the original, the reference, tolerances, held-out secrets or a verdict:
it receives arguments in the shared arena, runs the candidate on them, says what the entry point returned; for
timing it captures and replays the candidate's graph and reports times. Everything it says is treated by the checker as untrusted:
outputs are checked there, times are cross-checked there. A crash, hang or poisoned CUDA context here kills
only this process.

Order matters: the sandbox is in force before this module is imported, the timing primitives are bound
(``timing`` is imported) before any candidate is imported, this module's own code is registered with the tripwire
(``timing.tampered``) before it serves requests, and the sandbox's level is sent (``Hello``) before any request is
read.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch

from astra_sglang.harness.shared import timing  # binds the timer primitives before any candidate import
from astra_sglang.harness.shared.arena import Arena, views
from astra_sglang.harness.shared.isolation import die_with_parent
from astra_sglang.harness.shared.protocol import (
    CUDA_STICKY,
    Collect,
    Hello,
    Layout,
    Load,
    Ping,
    Prepare,
    ProtocolError,
    Recheck,
    Release,
    Reply,
    Request,
    Returned,
    ReturnValue,
    Run,
    Time,
    Use,
    Verify,
    WorkerJob,
    recv,
    send,
)
from astra_sglang.harness.shared.replay_guard import ReplayGuard
from astra_sglang.harness.shared.suite import with_call
from astra_sglang.harness.shared.tensors import ArgSet, torch_dtype

Launcher = Callable[[dict[str, Any]], Any]


def describe_return(ret: Any, args: dict[str, Any]) -> tuple[ReturnValue, list[bytes]]:
    """What the entry point returned: each element is an argument buffer (same address, shape, strides and
    dtype), a new tensor (its bytes follow the reply), None or something else."""
    frames: list[bytes] = []

    def item(x: Any) -> Returned:
        if x is None:
            return Returned(kind="none")
        if not isinstance(x, torch.Tensor):
            return Returned(kind="other", type_name=type(x).__name__)
        for name, a in args.items():
            if (isinstance(a, torch.Tensor) and a.data_ptr() == x.data_ptr() and a.shape == x.shape
                    and a.stride() == x.stride() and a.dtype == x.dtype and a.device == x.device):
                return Returned(kind="arg", name=name)
        raw = x.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()
        frames.append(raw)
        return Returned(kind="tensor", dtype=str(x.dtype).removeprefix("torch."), shape=list(x.shape),
                        nbytes=len(raw))

    if ret is None:
        return ReturnValue(container="none"), frames
    if isinstance(ret, torch.Tensor):
        return ReturnValue(container="tensor", items=[item(ret)]), frames
    if isinstance(ret, (tuple, list)):
        kind = "tuple" if isinstance(ret, tuple) else "list"
        return ReturnValue(container=kind, items=[item(x) for x in ret]), frames  # type: ignore[arg-type]
    return ReturnValue(container="other", type_name=type(ret).__name__), frames


class Worker:
    def __init__(self, job: WorkerJob, arena: Arena):
        self.job = job
        self.arena = arena
        self.manifest = job.manifest
        self.device = job.device
        self.clock = timing.clock_for(job.device)
        self.sources = job.variants or [job.candidate]
        self.active = 0
        self.launchers: dict[tuple[int, str, tuple[str, ...] | None], Launcher] = {}
        self.timed: tuple[Any, list[ArgSet], int, bool, Launcher] | None = None
        self.guard: ReplayGuard | None = None  # the timed sets' outputs (replay_guard.py); None when eager
        self.dev: torch.Tensor | None = None
        from astra_sglang.loader.launch import load_inputs

        self.op_inputs = load_inputs(Path(job.op_dir), job.manifest)  # the op's own generator, not the candidate's

    def _launcher(self, dtype: str, call: list[str] | None = None) -> Launcher:
        """The active source's launcher, calling it as the recipe does or as ``call`` (a recorded call form that
        leaves out output buffers: they are not passed at all, as at SGLang's call site)."""
        key = (self.active, dtype, tuple(call) if call is not None else None)
        if key not in self.launchers:
            from astra_sglang.loader.launch import make_launcher

            kw: dict[str, Any] = {}
            if self.manifest.source_kind == "cuda_jit":
                kw = dict(cache_dir=Path(self.job.cache_dir) if self.job.cache_dir else None, arch=self.job.arch)
            self.launchers[key] = make_launcher(Path(self.job.op_dir), with_call(self.manifest, call), dtype,
                                                kernel_source=Path(self.sources[self.active]), **kw)
        return self.launchers[key]

    def _region(self, layout: Layout) -> torch.Tensor:
        """Where the candidate runs: the arena itself on CPU; on CUDA one device copy of it, allocated once,
        so that a layout at the same offsets is at the same device addresses (the same-address re-runs)."""
        host = self.arena.host[:layout.end]
        if self.device != "cuda":
            return host
        if self.dev is None:
            self.dev = torch.empty(self.arena.nbytes, dtype=torch.uint8, device="cuda")
        region = self.dev[:layout.end]
        region.copy_(host)
        return region

    def _write_back(self, region: torch.Tensor, layout: Layout) -> None:
        if self.device == "cuda":
            self.arena.host[:layout.end].copy_(region)

    def handle(self, req: Any) -> tuple[Reply, list[bytes]]:
        if isinstance(req, Load):
            for dt in req.dtypes:
                self._launcher(dt)
            return Reply(ok=True, tampered=timing.tampered(),
                         device=self.clock.device_name() if self.job.simulate_timing or self.device == "cuda"
                         else ""), []
        if isinstance(req, Run):
            region = self._region(req.layout)
            args = views(region, req.layout)
            ret = self._launcher(req.dtype, req.call)(args)
            self.clock.sync()
            value, frames = describe_return(ret, args)
            self._write_back(region, req.layout)
            return Reply(ok=True, returned=value), frames
        if isinstance(req, Prepare):
            return self._prepare(req), []
        if isinstance(req, Time):
            graph, _, per_replay, eager, _ = self._timed()
            if eager:
                return Reply(ok=True, us=self.clock.time_eager(graph, req.replays, per_replay)), []
            between = self.guard.between(req.replays, req.keep, req.seed) if self.guard is not None else None
            return Reply(ok=True, us=self.clock.time_replays(graph, req.replays, per_replay, between)), []
        if isinstance(req, Collect):
            return self._collect(req), []
        if isinstance(req, Recheck):
            return self._recheck(req)
        if isinstance(req, Release):
            self.timed = self.guard = None
            if self.device == "cuda":
                torch.cuda.empty_cache()
            return Reply(ok=True), []
        if isinstance(req, Verify):
            return Reply(ok=True, tampered=timing.tampered()), []
        if isinstance(req, Ping):
            return Reply(ok=True), []
        if isinstance(req, Use):
            if not 0 <= req.index < len(self.sources):
                raise ProtocolError(f"no variant {req.index}")
            self.active, self.timed, self.guard = req.index, None, None
            return Reply(ok=True), []
        raise ProtocolError(f"unknown request {type(req).__name__}")

    def _timed(self) -> tuple[Any, list[ArgSet], int, bool, Launcher]:
        if self.timed is None:
            raise ProtocolError("no timing prepared")
        return self.timed

    def _prepare(self, req: Prepare) -> Reply:
        launch = self._launcher(req.dtype)
        sets = []
        for i in range(req.n_sets):
            a = ArgSet(self.manifest, req.dims, req.dtype, self.device, self.op_inputs)
            a.fill("normal", torch.Generator(device=self.device).manual_seed(req.seed + i))
            sets.append(a)
        arglists = [a.args() for a in sets] if req.cold else [sets[0].args()] * req.per_replay

        def run_all() -> None:
            for args in arglists:
                launch(args)

        self.guard = None
        if req.eager:
            run_all()
            self.clock.sync()
            self.timed = (run_all, sets, req.per_replay, True, launch)
            return Reply(ok=True)
        self.timed = (self.clock.capture(run_all), sets, req.per_replay, False, launch)
        outputs = [t.name for t in self.manifest.signature.tensors if t.role == "output"]
        self.guard = ReplayGuard(sets if req.cold else sets[:1], outputs)
        return Reply(ok=True)

    def _collect(self, req: Collect) -> Reply:
        kept = self.guard.kept if self.guard is not None else None
        if kept is None or not 0 <= req.index < len(kept):
            raise ProtocolError(f"no kept outputs of timing set {req.index}")
        for spec in req.layout.buffers:
            if spec.name not in self.guard.outputs:  # type: ignore[union-attr]
                continue
            buf = kept[req.index][self.guard.outputs.index(spec.name)]  # type: ignore[union-attr]
            if buf.numel() != spec.buf_numel:
                raise ProtocolError(f"{spec.name}: the layout's buffer has {spec.buf_numel} elements, the timed "
                                    f"one {buf.numel()}")
            n = buf.numel() * buf.element_size()
            self.arena.host[spec.offset:spec.offset + n].copy_(buf.reshape(-1).view(torch.uint8))
        return Reply(ok=True)

    def _recheck(self, req: Recheck) -> tuple[Reply, list[bytes]]:
        graph, sets, _, eager, launch = self._timed()
        first = sets[0]
        for s in req.layout.buffers:
            dt = torch_dtype(s.dtype)
            n = s.buf_numel * torch.empty((), dtype=dt).element_size()
            first.tensors[s.name].buf.copy_(self.arena.host[s.offset:s.offset + n].view(dt))
        value: Any = None
        frames: list[Any] = []
        if req.graph and not eager:
            self.clock.replay(graph)
            self.clock.sync()
        else:
            ret = launch(first.args())
            self.clock.sync()
            value, frames = describe_return(ret, first.args())
        for s in req.layout.buffers:
            buf = first.tensors[s.name].buf
            n = buf.numel() * buf.element_size()
            self.arena.host[s.offset:s.offset + n].copy_(buf.reshape(-1).view(torch.uint8))
        return Reply(ok=True, returned=value), frames


def main(argv: list[str], sandbox: str = "none: started without the sandbox (python -m astra_sglang.harness.worker "
         "installs it)") -> None:
    """Serve the judge's requests. ``sandbox`` is what ``sandbox.install`` put in force before this module was
    imported; it is the first thing the judge hears, before any candidate code can run here."""
    die_with_parent()  # a worker whose judge is gone has no one to answer: never let it spin on
    faulthandler.enable()
    rfd, wfd, arena_fd = (int(x) for x in argv[:3])
    conn_in, conn_out = Connection(rfd, writable=False), Connection(wfd, readable=False)
    try:
        send(conn_out, Hello(sandbox=sandbox))
        job = recv(conn_in, WorkerJob)
        arena = Arena(job.arena_bytes, arena_fd)
        if job.device == "cuda":
            arena.pin()
        worker = Worker(job, arena)
        while True:
            try:
                req = recv(conn_in, Request).req
            except (EOFError, ProtocolError):
                break
            try:
                reply, frames = worker.handle(req)
            except BaseException as e:  # noqa: BLE001 - any failure of candidate code is reported, not fatal
                msg = f"{type(e).__name__}: {e}".strip()
                reply, frames = Reply(ok=False, error=msg[:4000], traceback=traceback.format_exc()[-4000:],
                                      sticky=any(s in msg for s in CUDA_STICKY)), []
            send(conn_out, reply)
            for f in frames:
                conn_out.send_bytes(f)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # no interpreter teardown: stray candidate threads or a dead CUDA context cannot hang us


timing.watch_code(sys.modules[__name__])

if __name__ == "__main__":
    main(sys.argv[1:])
