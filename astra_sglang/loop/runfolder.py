"""The run folder, written as the run goes, so a killed run loses at most the step in flight.

Layout of ``runs/<op>/<run-id>/``:
- ``run.json``: RunMeta (options, status, winner); ``log.jsonl``: one RoundRecord per finished round;
  ``steps.jsonl``: one StepRecord per agent step (the SDK's token usage of its run, wall time); ``calls/``:
  every model request and response; ``rounds/rNNN/``: each finished step's output (``suite.json``, ``diagnosis.json``,
  ``plan.json``, ``code.json``, ``result.json``, ``record.json``) and every candidate source;
  ``evals/``: evaluation cache; ``best/``: the winner and its evidence.
A finished step's file is its checkpoint: ``--resume`` loads it instead of running the step again.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from astra_sglang.contract.base import pid_alive
from astra_sglang.contract.base import write_atomic as atomic_write
from astra_sglang.errors import AstraError
from astra_sglang.loop.records import RoundRecord, RunMeta, StepRecord

M = TypeVar("M", bound=BaseModel)


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")



def new_run_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S") + f"-{os.getpid() % 10000:04d}"


class RunFolder:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    # ------------------------------------------------------------------------------------------ layout
    @property
    def meta_path(self) -> Path:
        return self.path / "run.json"

    @property
    def best_dir(self) -> Path:
        return self.path / "best"

    @property
    def evals_dir(self) -> Path:
        return self.path / "evals"

    def round_dir(self, rnd: int) -> Path:
        return self.path / "rounds" / f"r{rnd:03d}"

    # --------------------------------------------------------------------------------------- lifecycle
    @staticmethod
    def new_path(runs_dir: Path, op: str, run_id: str) -> Path:
        """Where ``create`` puts a new run, refused when it exists: ``optimize --run-id`` asks this before it
        probes the model or writes anything, so a taken run id leaves nothing behind."""
        path = Path(runs_dir) / op / run_id
        if path.exists():
            raise AstraError(f"run folder {path} already exists; use --resume {run_id} or another --run-id")
        return path

    @classmethod
    def create(cls, runs_dir: Path, op: str, run_id: str) -> RunFolder:
        path = cls.new_path(runs_dir, op, run_id)
        try:
            path.mkdir(parents=True)
        except OSError as e:
            raise AstraError(f"cannot create the run folder {path}: {e.strerror or e} (choose another --runs-dir)") from None
        return cls(path)

    @classmethod
    def find(cls, runs_dir: Path, run: str) -> RunFolder:
        """``--resume RUN``: a path to the run folder, or a run id under ``runs_dir/<op>/``."""
        direct = Path(run)
        if (direct / "run.json").is_file():
            return cls(direct)
        hits = sorted(Path(runs_dir).glob(f"*/{run}/run.json"))
        if len(hits) == 1:
            return cls(hits[0].parent)
        if not hits:
            raise AstraError(f"no run {run!r}: neither a run folder nor a run id under {runs_dir}/<op>/")
        raise AstraError(f"run id {run!r} is ambiguous: {', '.join(str(h.parent) for h in hits)}")

    def lock(self) -> None:
        """Two processes writing one run folder would corrupt it: refuse while the other one is alive."""
        lock = self.path / "lock"
        if lock.exists():
            try:
                info = json.loads(lock.read_text())
                pid, host = int(info["pid"]), info.get("host")
            except (ValueError, KeyError, OSError, json.JSONDecodeError):
                pid, host = -1, None
            if host == socket.gethostname() and pid > 0 and pid != os.getpid() and pid_alive(pid):
                raise AstraError(f"run {self.path} is being written by process {pid}; wait for it or stop it")
        atomic_write(lock, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": now_iso()}))

    def unlock(self) -> None:
        (self.path / "lock").unlink(missing_ok=True)

    # ------------------------------------------------------------------------------------------- meta
    def write_meta(self, meta: RunMeta) -> None:
        meta.updated = now_iso()
        atomic_write(self.meta_path, meta.model_dump_json(indent=2) + "\n")

    def read_meta(self) -> RunMeta:
        try:
            return RunMeta.model_validate_json(self.meta_path.read_text())
        except (OSError, ValueError) as e:
            raise AstraError(f"{self.meta_path}: unreadable run metadata ({type(e).__name__})") from None

    # ------------------------------------------------------------------------------------ checkpoints
    def step_path(self, rnd: int, name: str) -> Path:
        return self.round_dir(rnd) / f"{name}.json"

    def load_step(self, rnd: int, name: str, model: type[M]) -> M | None:
        path = self.step_path(rnd, name)
        if not path.is_file():
            return None
        try:
            return model.model_validate_json(path.read_text())
        except ValueError:
            return None  # a torn or stale checkpoint: the step runs again

    def save_step(self, rnd: int, name: str, value: BaseModel) -> Path:
        path = self.step_path(rnd, name)
        atomic_write(path, value.model_dump_json(indent=1) + "\n")
        return path

    def write_source(self, rnd: int, name: str, source: str) -> Path:
        path = self.round_dir(rnd) / name
        atomic_write(path, source)
        return path

    # ------------------------------------------------------------------------------------------- logs
    def _append(self, name: str, line: str) -> None:
        with open(self.path / name, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def finish_round(self, record: RoundRecord) -> None:
        """record.json is the checkpoint; log.jsonl is the append-only log a reader tails."""
        self.save_step(record.round, "record", record)
        self._append("log.jsonl", record.model_dump_json())

    def records(self) -> list[RoundRecord]:
        out = []
        for path in sorted((self.path / "rounds").glob("r*/record.json")):
            try:
                out.append(RoundRecord.model_validate_json(path.read_text()))
            except ValueError:
                continue
        return sorted(out, key=lambda r: r.round)

    def record(self, rnd: int) -> RoundRecord | None:
        return self.load_step(rnd, "record", RoundRecord)

    def append_step(self, step: StepRecord) -> None:
        self._append("steps.jsonl", step.model_dump_json())

    # ---------------------------------------------------------------------------- model call records
    def record_call(self, record) -> None:  # record: agents.recording.ModelCallRecord
        calls = self.path / "calls"
        calls.mkdir(exist_ok=True)
        n = len(list(calls.glob("*.json"))) + 1
        rnd = "r---" if record.round is None else f"r{record.round:03d}"
        atomic_write(calls / f"{n:05d}-{rnd}-{record.agent}-{record.step}.json", record.model_dump_json(indent=1))

