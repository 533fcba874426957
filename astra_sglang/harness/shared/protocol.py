"""The messages between the evaluate parent, the trusted checker and the candidate worker, as typed models.

Every message is JSON (``send``/``recv`` below), never a pickle: the candidate worker runs untrusted code, and
unpickling what it sends would run whatever it chose inside the checker. Tensor contents never travel here:
arguments live in a shared host arena (``arena.py``) described by a ``Layout``; only a tensor the candidate
returns by value follows its reply as raw bytes, bounded by the size the signature declares.

Flow: parent --CheckJob--> checker; checker --Progress*--> parent, then one CheckResult or CheckerError.
Checker --WorkerJob, then Request*--> worker; worker --one Reply per Request--> checker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypeVar

from pydantic import Field, ValidationError

from astra_sglang.contract.base import Model
from astra_sglang.contract.eval_config import EvalConfig
from astra_sglang.contract.op import Manifest
from astra_sglang.contract.result import CorrectnessReport, FailedCase, ShapeTiming

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

CUDA_STICKY = ("illegal memory access", "illegal address", "unspecified launch failure", "misaligned address",
               "device-side assert", "an illegal instruction", "CUDA error")  # errors that poison a CUDA context
TIMING_BATCH = 25  # timed replays per side between two switches of process (checker <-> worker)

Scalar = float | int | bool | str | None
M = TypeVar("M", bound=Model)


class ProtocolError(Exception):
    """A peer sent something that is not the expected message (or nothing at all)."""


def send(conn: Connection, msg: Model) -> None:
    conn.send_bytes(msg.model_dump_json().encode())


def recv(conn: Connection, model: type[M], maxlength: int = 64 << 20) -> M:
    try:
        data = conn.recv_bytes(maxlength)
    except OSError as e:  # "bad message length": a reply over the bound
        raise ProtocolError(f"unreadable message: {e}") from None
    try:
        return model.model_validate_json(data)
    except ValidationError as e:
        raise ProtocolError(f"not a valid {model.__name__}: {str(e)[:500]}") from None


# ----------------------------------------------------------------------------------- parent <-> checker


class CaseSpec(Model):
    """One correctness case; held-out ones reach only the checker, never the candidate's process."""

    dims: dict[str, int]
    dtype: str
    distribution: str
    seed: int
    heldout: bool = False
    tags: list[str] = Field(default_factory=list)
    call: list[str] | None = Field(None, description="the call form a call site uses (suite.call_forms), e.g. "
                                   "outputs left out and returned; None: the recipe's call")


class CheckJob(Model):
    op_dir: str
    manifest: Manifest
    candidate: str | None
    device: Literal["cpu", "cuda"]
    config: EvalConfig
    warmup: int
    rep: int
    timing_seed: int
    cases: list[CaseSpec]
    timed_shapes: list[dict[str, int]]
    timing_dtypes: list[str]
    ceiling: float | None = None
    baselines: list[str] = Field(default_factory=list)
    variants: list[str] = Field(default_factory=list, description="a sweep (sweep_checks.py): every variant "
                                "checked on ``cases`` then timed against the original, in one worker")
    refusals_per_shape: bool = Field(default=False, description="a sweep of the original's own launch configs "
                                     "(sweep_checks.py): a variant the GPU refuses to launch at a shape (shared "
                                     "memory, registers) skips that shape instead of being dropped")


class Progress(Model):
    """Sent before each step: the parent's watchdog counts silence from the last one, a crash names it."""

    kind: Literal["progress"] = "progress"
    step: str
    index: int | None = None
    heldout: bool = False
    case: CaseSpec | None = None
    dims: dict[str, int] | None = None
    dtype: str | None = None


class TimedShape(Model):
    row: ShapeTiming
    method: str
    suspect_reason: str | None = None


class VariantOutcome(Model):
    """One variant of a sweep: the first check it failed, or its timed shapes."""

    index: int
    failure: FailedCase | None = None
    timing: list[TimedShape] = Field(default_factory=list)
    refused: list[FailedCase] = Field(default_factory=list, description="with ``refusals_per_shape``: the cases "
                                      "and timed shapes it could not launch at (never checked or timed there)")


class CheckResult(Model):
    kind: Literal["result"] = "result"
    device: str
    build_error: str | None = None
    correctness: CorrectnessReport | None = None
    timing: list[TimedShape] | None = None
    ceiling: float | None = None
    notes: list[str] = Field(default_factory=list)
    sweep: list[VariantOutcome] | None = None
    sandbox: str | None = Field(None, description="the OS sandbox the worker reported before any candidate import "
                                "(sandbox.install), checked against /proc; None: no worker ran")


class CheckerError(Model):
    """An exception inside the checker itself (a harness bug or an original that breaks), with its traceback."""

    kind: Literal["error"] = "error"
    error: str
    traceback: str = ""


class CheckerMessage(Model):
    msg: Progress | CheckResult | CheckerError = Field(discriminator="kind")


# ----------------------------------------------------------------------------------- checker <-> worker


class BufferSpec(Model):
    """One guarded buffer in the arena: ``numel`` elements of ``dtype`` at byte ``offset``; the view the
    kernel sees starts ``start`` elements in and has ``shape``."""

    name: str
    offset: int
    dtype: str
    buf_numel: int
    start: int
    shape: list[int]
    row_stride: int | None = None  # elements between the view's rows (a row-strided input); None: contiguous


class Layout(Model):
    buffers: list[BufferSpec]
    scalars: dict[str, Scalar] = Field(default_factory=dict)
    end: int = Field(description="first arena byte past the last buffer")


class WorkerJob(Model):
    op_dir: str
    manifest: Manifest
    candidate: str
    device: Literal["cpu", "cuda"]
    simulate_timing: bool = False
    cache_dir: str | None = None
    arch: str = "sm_90a"
    arena_bytes: int
    variants: list[str] = Field(default_factory=list, description="a sweep's sources; ``Use`` picks one")


class Hello(Model):
    """The worker's first message, sent before it reads its job and before any candidate code is imported: the OS
    sandbox in force (``sandbox.install``'s level). Later replies pass through code the candidate can patch."""

    sandbox: str


class Load(Model):
    op: Literal["load"] = "load"
    dtypes: list[str]


class Run(Model):
    """Run the candidate once on the arguments in the arena, in place, and describe what it returned."""

    op: Literal["run"] = "run"
    dtype: str
    layout: Layout
    call: list[str] | None = Field(None, description="call it this way (a recorded call form) instead of the "
                                   "recipe's call: the arguments it leaves out are not passed at all")


class Prepare(Model):
    """Allocate the timing sets for one shape (values drawn in the worker: timing needs no secrets) and
    capture the candidate over them (``eager``: time plain calls, as the original could not be captured)."""

    op: Literal["prepare"] = "prepare"
    dims: dict[str, int]
    dtype: str
    n_sets: int
    per_replay: int
    cold: bool
    seed: int
    eager: bool = False


class Time(Model):
    """``replays`` timed replays, the timing sets' outputs poisoned before each; with ``keep``, that replay's
    outputs kept for a ``Collect``, and with ``seed`` that replay's inputs perturbed (replay_guard.py)."""

    op: Literal["time"] = "time"
    replays: int
    keep: int | None = None
    seed: int | None = None


class Collect(Model):
    """Copy timing set ``index``'s outputs as kept after the last batch's ``keep`` replay (whole buffers,
    guards included) into the arena at ``layout``'s places; nothing else of the layout is written."""

    op: Literal["collect"] = "collect"
    layout: Layout
    index: int


class Recheck(Model):
    """After timing: load the arena's values into the first timed set, run the captured graph (or an eager
    call) there, and copy that set back into the arena for the checker to check."""

    op: Literal["recheck"] = "recheck"
    layout: Layout
    graph: bool


class Release(Model):
    op: Literal["release"] = "release"


class Verify(Model):
    op: Literal["verify"] = "verify"


class Ping(Model):
    op: Literal["ping"] = "ping"


class Use(Model):
    """A sweep: later requests run variant ``index`` (its launchers are kept; timing set-up is released)."""

    op: Literal["use"] = "use"
    index: int


class Request(Model):
    req: Load | Run | Prepare | Time | Collect | Recheck | Release | Verify | Ping | Use = Field(discriminator="op")


class Returned(Model):
    """One element of what the entry point returned, as the worker saw it."""

    kind: Literal["arg", "tensor", "none", "other"]
    name: str | None = Field(None, description="kind 'arg': the argument buffer it is (same address/shape)")
    dtype: str | None = None
    shape: list[int] = Field(default_factory=list)
    nbytes: int = Field(0, description="kind 'tensor': its contents follow the reply as one bytes frame")
    type_name: str = ""


class ReturnValue(Model):
    container: Literal["none", "tensor", "tuple", "list", "other"]
    items: list[Returned] = Field(default_factory=list)
    type_name: str = ""


class Reply(Model):
    ok: bool
    error: str = ""
    traceback: str = ""
    sticky: bool = Field(False, description="a CUDA error that poisons the context")
    returned: ReturnValue | None = None
    us: list[float] = Field(default_factory=list, description="Time: per-launch microseconds of each replay")
    tampered: list[str] = Field(default_factory=list, description="timing/worker primitives found rebound")
    device: str = ""


def failed_case(spec: CaseSpec, reason: str, detail: str, tensor: str | None = None,
                max_abs_err: float | None = None, max_rel_err: float | None = None) -> FailedCase:
    """The report of a failed case; a held-out one reveals neither its shape, its seed nor its numbers."""
    if spec.heldout:
        return FailedCase(reason=reason, detail=f"{reason} on a held-out case", dtype=spec.dtype,
                          distribution=spec.distribution, heldout=True, max_abs_err=max_abs_err,
                          max_rel_err=max_rel_err)
    return FailedCase(reason=reason, detail=detail, dims=dict(spec.dims), dtype=spec.dtype,
                      distribution=spec.distribution, seed=spec.seed, tensor=tensor, max_abs_err=max_abs_err,
                      max_rel_err=max_rel_err)
