"""The one place the loop meets the harness: evaluate here, or through an evaluation queue on a GPU host.

The loop asks two questions: ``evaluate`` (the round's verdict: build, correctness, timing) and ``check``
(a quick build + correctness answer for the coding agent within a round). ``LocalEvaluator`` answers both
with ``astra_sglang.harness`` on this host. ``QueueEvaluator`` writes evaluation requests to a folder for
``python -m astra_sglang evaluate QUEUE`` on a GPU host and raises ``EvalPending`` until results appear;
its ``check`` does what this host can (a local harness check where it can run the kernel, else a
compile-only build for CUDA, else the static form check).
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from astra_sglang.contract.base import sha256_text
from astra_sglang.contract.eval_config import EvalConfig, ExtraCase
from astra_sglang.contract.op import (
    CudaJitRecipe,
    Manifest,
    TritonRecipe,
    load_manifest,
)
from astra_sglang.contract.result import BuildReport, EvalResult
from astra_sglang.errors import AstraError
from astra_sglang.loop.records import CheckReport, EvalSpec, QueueRequest, TuneOutcome
from astra_sglang.loop.runfolder import atomic_write, now_iso
from astra_sglang.loop.static_check import check_source


class EvalPending(Exception):
    """Results are not in the queue yet: the run stops cleanly and ``--resume`` picks them up."""

    def __init__(self, queue_dir: Path, items: list[str]) -> None:
        self.queue_dir = queue_dir
        self.items = items
        super().__init__(f"waiting for {len(items)} evaluation(s) in {queue_dir}: {', '.join(items)}")



def spec_key(spec: EvalSpec, timing: bool = True) -> str:
    return sha256_text(spec.model_dump_json() + f"|timing={timing}")[:12]


def to_eval_config(spec: EvalSpec, *, timing: bool = True) -> EvalConfig:
    """EvalSpec -> the harness's EvalConfig, the Testing agent's accepted cases included."""
    kw: dict[str, Any] = {
        "shapes": spec.shapes, "include_heldout": spec.include_heldout, "device": spec.device, "mode": spec.mode,
        "timing": timing,
        "extra_cases": [ExtraCase(dims={d.name: d.value for d in c.dims}, dtype=c.dtype, distribution=c.distribution)
                        for c in spec.suite],
        **spec.harness,
    }
    try:
        return EvalConfig(**kw)
    except ValueError as e:
        raise AstraError(f"invalid evaluation settings {spec.harness}: {e}") from None


def _failure_text(result: EvalResult) -> str | None:
    c = result.correctness
    if c is None or c.first_failure is None:
        return result.error
    f = c.first_failure
    parts = [f.reason]
    if f.detail:
        parts.append(f.detail)
    if f.dims:
        parts.append(f"dims={f.dims}")
    for name in ("dtype", "distribution", "tensor", "seed", "max_abs_err", "max_rel_err"):
        value = getattr(f, name)
        if value is not None:
            parts.append(f"{name}={value}")
    return ", ".join(parts)


def check_from_result(result: EvalResult) -> CheckReport:
    built = result.build.ok
    correct = None if not built or result.correctness is None else result.correctness.ok
    log = result.build.log if not built else ""
    if built and result.error and correct is None:
        log = result.error
    return CheckReport(built=built, correct=correct, how="harness", log=log[-6000:],
                       first_failure=_failure_text(result) if correct is False else None, result=result)


class Evaluator(ABC):
    def __init__(self, op_dir: Path, manifest: Manifest | None = None) -> None:
        self.op_dir = Path(op_dir)
        self.manifest = manifest or load_manifest(self.op_dir)

    description: str = ""

    @abstractmethod
    def evaluate(self, label: str, candidate: Path | None, spec: EvalSpec) -> EvalResult: ...

    @abstractmethod
    def check(self, candidate: Path, spec: EvalSpec) -> CheckReport: ...

    def sweep_baseline(self, spec: EvalSpec) -> TuneOutcome:
        """The original's launch parameters swept (``astra-sglang tune``); an op folder's tune_baseline.json
        when this evaluator cannot time."""
        from astra_sglang.harness.tune_baseline import BASELINE_NAME, read_baseline

        found = read_baseline(self.op_dir)
        if found is not None:
            return TuneOutcome(baseline=found)
        return TuneOutcome(error=f"missing: no timing here and no {self.op_dir / BASELINE_NAME} (run `astra-sglang "
                                 f"tune {self.manifest.short_name}` on a GPU host)")

    def static(self, candidate: Path) -> CheckReport | None:
        problem = check_source(Path(candidate).read_text(), self.op_dir, self.manifest)
        return CheckReport(built=False, how="static", log=problem) if problem else None


class LocalEvaluator(Evaluator):
    """The harness on this host; results cached by (candidate content, spec) so nothing is measured twice."""

    def __init__(self, op_dir: Path, manifest: Manifest | None = None, cache_dir: Path | None = None) -> None:
        super().__init__(op_dir, manifest)
        self.cache_dir = cache_dir
        self.description = "local harness"

    def _key(self, candidate: Path | None, spec: EvalSpec, timing: bool) -> str:
        content = Path(candidate).read_text() if candidate is not None else "original"
        return f"{sha256_text(content)[:16]}-{spec_key(spec, timing)}"

    def _cached(self, key: str) -> EvalResult | None:
        if self.cache_dir is None:
            return None
        path = self.cache_dir / f"{key}.json"
        if path.is_file():
            try:
                return EvalResult.model_validate_json(path.read_text())
            except ValueError:
                return None
        return None

    def _run(self, candidate: Path | None, spec: EvalSpec, timing: bool) -> EvalResult:
        key = self._key(candidate, spec, timing)
        hit = self._cached(key)
        if hit is not None:
            return hit
        # A full evaluation answers the check too; and on a device that cannot time, a correctness-only
        # result is the full evaluation, so the round's verdict reuses the coding agent's last check.
        other = self._cached(self._key(candidate, spec, not timing))
        if other is not None and (not timing or other.timing is None and other.device.startswith("cpu")):
            return other
        from astra_sglang.harness.evaluate import evaluate

        result = evaluate(self.op_dir, candidate, to_eval_config(spec, timing=timing))
        if self.cache_dir is not None:
            atomic_write(self.cache_dir / f"{key}.json", result.model_dump_json(indent=1))
        return result

    def evaluate(self, label: str, candidate: Path | None, spec: EvalSpec) -> EvalResult:
        return self._run(candidate, spec, timing=True)

    def sweep_baseline(self, spec: EvalSpec) -> TuneOutcome:
        from astra_sglang.harness.evaluate import resolve_device

        config = to_eval_config(spec)
        if resolve_device(config) != "cuda":
            return super().sweep_baseline(spec)
        path = self.cache_dir / f"tune-{spec_key(spec)}.json" if self.cache_dir is not None else None
        if path is not None and path.is_file():
            try:
                return TuneOutcome.model_validate_json(path.read_text())
            except ValueError:
                pass
        outcome = run_tune(self.op_dir, config)
        if path is not None:
            atomic_write(path, outcome.model_dump_json(indent=1))
        return outcome

    def check(self, candidate: Path, spec: EvalSpec) -> CheckReport:
        static = self.static(candidate)
        if static is not None:
            return static
        return check_from_result(self._run(candidate, spec.model_copy(update={"include_heldout": False}), False))


# ------------------------------------------------------------------------------------------------ queue


RESULT_NAME = "result.json"
REQUEST_NAME = "request.json"


def read_queue_result(item_dir: Path, request: QueueRequest) -> EvalResult | None:
    path = item_dir / RESULT_NAME
    if not path.is_file():
        return None
    try:
        result = EvalResult.model_validate_json(path.read_text())
    except ValueError:
        return None  # half-written or foreign: keep waiting
    if request.candidate_sha256 and result.candidate_sha256 and result.candidate_sha256 != request.candidate_sha256:
        raise AstraError(f"{path}: result is for another candidate (sha256 {result.candidate_sha256[:12]}, "
                         f"request {request.candidate_sha256[:12]}); delete it and evaluate again")
    return result


class QueueEvaluator(Evaluator):
    def __init__(self, op_dir: Path, queue_dir: Path, run_id: str, manifest: Manifest | None = None,
                 wait_s: float = 0.0, poll_s: float = 5.0, note: str | None = None,
                 check_cache: Path | None = None) -> None:
        super().__init__(op_dir, manifest)
        self.queue_dir = Path(queue_dir)
        self.run_id = run_id
        self.wait_s = wait_s
        self.poll_s = poll_s
        self.note = note
        self.local = LocalEvaluator(op_dir, self.manifest, check_cache)
        self.description = f"evaluation queue {queue_dir}"

    def _item(self, label: str, candidate: Path | None, spec: EvalSpec) -> tuple[Path, QueueRequest]:
        content = Path(candidate).read_text() if candidate is not None else None
        sha = sha256_text(content) if content is not None else None
        item_id = f"{self.run_id}--{label}"
        item_dir = self.queue_dir / item_id
        request = QueueRequest(item_id=item_id, run_id=self.run_id, label=label, op=self.manifest.short_name,
                               op_id=self.manifest.op_id, spec=spec, created=now_iso(), note=self.note,
                               candidate_file=("candidate" + Path(candidate).suffix) if candidate else None,
                               candidate_sha256=sha)
        existing = item_dir / REQUEST_NAME
        if existing.is_file():
            try:
                old = QueueRequest.model_validate_json(existing.read_text())
                if old.candidate_sha256 == sha and old.spec == spec:
                    return item_dir, old
            except ValueError:
                pass
            raise AstraError(f"queue item {item_dir} holds a different request; remove it or use a new run id")
        if content is not None:
            atomic_write(item_dir / request.candidate_file, content)  # type: ignore[operator]
        atomic_write(existing, request.model_dump_json(indent=1))
        return item_dir, request

    def evaluate(self, label: str, candidate: Path | None, spec: EvalSpec) -> EvalResult:
        item_dir, request = self._item(label, candidate, spec)
        deadline = time.monotonic() + self.wait_s
        while True:
            result = read_queue_result(item_dir, request)
            if result is not None:
                return result
            if time.monotonic() >= deadline:
                raise EvalPending(self.queue_dir, [request.item_id])
            time.sleep(min(self.poll_s, max(0.05, deadline - time.monotonic())))

    def sweep_baseline(self, spec: EvalSpec) -> TuneOutcome:
        """A ``tune`` item for the GPU host (answered by ``evaluate QUEUE`` with baseline.json); a CPU-sized
        spec (shapes=test) has nothing to time: the op folder's file or a line saying it is missing."""
        if spec.shapes == "test" or spec.device == "cpu":
            return super().sweep_baseline(spec)
        item_id = f"{self.run_id}--r000-tune"
        item_dir = self.queue_dir / item_id
        request = QueueRequest(item_id=item_id, run_id=self.run_id, label="r000-tune", op=self.manifest.short_name,
                               op_id=self.manifest.op_id, spec=spec, created=now_iso(), note=self.note, job="tune")
        if not (item_dir / REQUEST_NAME).is_file():
            atomic_write(item_dir / REQUEST_NAME, request.model_dump_json(indent=1))
        deadline = time.monotonic() + self.wait_s
        while True:
            outcome = read_tune_outcome(item_dir)
            if outcome is not None:
                return outcome
            if time.monotonic() >= deadline:
                raise EvalPending(self.queue_dir, [item_id])
            time.sleep(min(self.poll_s, max(0.05, deadline - time.monotonic())))

    def check(self, candidate: Path, spec: EvalSpec) -> CheckReport:
        static = self.static(candidate)
        if static is not None:
            return static
        recipe = self.manifest.recipe
        if _can_run_locally(recipe):
            return self.local.check(candidate, spec)
        if isinstance(recipe, CudaJitRecipe):
            return _compile_only(self.op_dir, self.manifest, candidate)
        return CheckReport(built=True, how="static", log="form checked only: this host cannot build or run it")


def _can_run_locally(recipe: Any) -> bool:
    if isinstance(recipe, TritonRecipe) and os.environ.get("TRITON_INTERPRET") == "1":
        return True
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def _compile_only(op_dir: Path, manifest: Manifest, candidate: Path) -> CheckReport:
    """nvcc without a GPU: the build errors are the ones the coding agent must see before the queue trip."""
    try:
        from astra_sglang.loader.cuda_build import build_cuda_module

        dtype = manifest.signature.dtypes[0]
        built = build_cuda_module(op_dir, manifest, dtype, kernel_source=candidate, load=False)
        report: BuildReport = built.report
        return CheckReport(built=report.ok, how="compile-only", log=report.log[-6000:] if not report.ok else "")
    except AstraError as e:
        return CheckReport(built=False, how="compile-only", log=str(e)[-6000:])
    except Exception as e:  # toolchain missing etc.: say so, let the queue decide
        return CheckReport(built=True, how="static", log=f"compile-only check unavailable here ({type(e).__name__}: {e})")


TUNE_RESULT_NAME = "baseline.json"


def run_tune(op_dir: Path, config: EvalConfig) -> TuneOutcome:
    from astra_sglang.harness.tune_baseline import sweep_baseline

    try:
        return TuneOutcome(baseline=sweep_baseline(op_dir, config))
    except AstraError as e:  # e.g. an op whose source exposes nothing to sweep: said, never fatal to the run
        return TuneOutcome(error=str(e))


def read_tune_outcome(item_dir: Path) -> TuneOutcome | None:
    try:
        return TuneOutcome.model_validate_json((item_dir / TUNE_RESULT_NAME).read_text())
    except (OSError, ValueError):
        return None


def list_queue(queue_dir: Path) -> list[tuple[Path, QueueRequest, EvalResult | TuneOutcome | None]]:
    out: list[tuple[Path, QueueRequest, EvalResult | TuneOutcome | None]] = []
    for path in sorted(Path(queue_dir).glob(f"*/{REQUEST_NAME}")):
        try:
            request = QueueRequest.model_validate_json(path.read_text())
        except ValueError:
            continue
        if request.job == "tune":
            out.append((path.parent, request, read_tune_outcome(path.parent)))
            continue
        result_path = path.parent / RESULT_NAME
        result = None
        if result_path.is_file():
            try:
                result = EvalResult.model_validate_json(result_path.read_text())
            except ValueError:
                result = None
        out.append((path.parent, request, result))
    return out


def process_queue(queue_dir: Path, extracted_root: Path, device: str | None = None,
                  progress: Any = None) -> list[tuple[str, EvalResult]]:
    """Fill in every pending request (the GPU-host side of the queue). Returns what was evaluated."""
    from astra_sglang.harness.evaluate import evaluate

    done: list[tuple[str, EvalResult]] = []
    for item_dir, request, result in list_queue(queue_dir):
        if result is not None:
            continue
        op_dir = Path(extracted_root) / request.op
        manifest = load_manifest(op_dir)
        if manifest.op_id != request.op_id:
            raise AstraError(f"{item_dir}: request is for op {request.op_id}, {op_dir} holds {manifest.op_id}")
        spec = request.spec if device is None else request.spec.model_copy(update={"device": device})
        candidate = item_dir / request.candidate_file if request.candidate_file else None
        if progress is not None:
            progress(request)
        if request.job == "tune":
            atomic_write(item_dir / TUNE_RESULT_NAME, run_tune(op_dir, to_eval_config(spec)).model_dump_json(indent=1))
            continue
        result = evaluate(op_dir, candidate, to_eval_config(spec))
        atomic_write(item_dir / RESULT_NAME, result.model_dump_json(indent=1))
        done.append((request.item_id, result))
    return done


def queue_status(queue_dir: Path) -> dict[str, int]:
    items = list_queue(queue_dir)
    return {"pending": sum(1 for _, _, r in items if r is None), "done": sum(1 for _, _, r in items if r is not None)}
