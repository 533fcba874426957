"""The one place the loop meets the harness: evaluate here, or through an evaluation queue on a GPU host.

The loop asks two questions: ``evaluate`` (the round's verdict: build, correctness, timing) and ``check``
(a quick build + correctness answer for the coding agent within a round). ``LocalEvaluator`` answers both
with ``astra_sglang.harness`` on this host. ``QueueEvaluator`` writes evaluation requests to a folder for
``python -m astra_sglang evaluate QUEUE`` on a GPU host and raises ``EvalPending`` until results appear;
its ``check`` does what this host can: a local harness check where a GPU is visible; without one, a Triton
candidate runs under the Triton interpreter on the test shapes (a real correctness verdict, no timing) and a
CUDA candidate is built with nvcc (compiler errors and the ptxas report, not run). Every check says in one
sentence exactly what ran (``CheckReport.ran``).

``evaluate_many`` judges a round's K candidates together: one harness call here (builds in parallel, checks
one after another), or all K written to the queue at once, so a queue run stops once per round, not K times.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from astra_sglang import platform_info
from astra_sglang.contract.base import sha256_text
from astra_sglang.contract.eval_config import EvalConfig, ExtraCase
from astra_sglang.contract.op import (
    CudaJitRecipe,
    Manifest,
    TritonRecipe,
    canonical_op_id,
    load_manifest,
    verdict_digest,
)
from astra_sglang.contract.result import BuildReport, EvalResult, SweepBaseline
from astra_sglang.errors import AstraError
from astra_sglang.loop.records import NOT_RETIMED, CheckReport, EvalSpec, QueueRequest, TuneOutcome
from astra_sglang.loop.runfolder import atomic_write, now_iso
from astra_sglang.loop.static_check import check_source
from astra_sglang.platform_info import gpu_of_text, same_gpu


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


def check_from_result(result: EvalResult, shapes: int | None = None) -> CheckReport:
    built = result.build.ok
    correct = None if not built or result.correctness is None else result.correctness.ok
    log = result.build.log if not built else ""
    if built and result.error and correct is None:
        log = result.error
    if correct is False and interpreter_too_slow(result):
        return CheckReport(built=True, correct=None, how="harness", result=result,
                           ran=_too_slow_text(result, shapes))
    return CheckReport(built=built, correct=correct, how="harness", log=log[-6000:],
                       first_failure=_failure_text(result) if correct is False else None, result=result,
                       ran=what_ran(result, shapes))


def interpretable(manifest: Manifest, spec: EvalSpec) -> tuple[EvalSpec | None, str]:
    """``spec`` less what Triton's CPU interpreter computes wrongly for this op (the dtypes validate-contract
    leaves out by name, INTERPRETER_LIMITS), and a sentence saying what was left out; (None, why) when nothing of
    the op can run there. A GPU run keeps everything. In a check on CPU, SGLang's own fused-MoE original and a
    correct candidate both compute bf16 tl.dot on raw bits (errors near 1e11), and a candidate tiled otherwise
    failed "tolerance + the original's own error" at a few elements: the coding agent pinned BLOCK_SIZE_K to the
    config's to get past a phantom (mr-moed-k4, round 1, 2026-12-06)."""
    from astra_sglang.harness import resolve_device
    from astra_sglang.harness.parent.contract_validation import interpretable_dtypes

    if spec.device == "cuda":
        return spec, ""
    config = to_eval_config(spec, timing=False)
    kept, left, why = interpretable_dtypes(manifest, config, resolve_device(config))
    if not left:
        return spec, ""
    said = (f"{'/'.join(left)} not checked here: {manifest.short_name} in {'/'.join(left)} {why}; the GPU "
            "evaluation checks it")
    if not kept:
        return None, said
    suite = [c for c in spec.suite if c.dtype in kept]
    return spec.model_copy(update={"harness": {**spec.harness, "dtypes": kept}, "suite": suite}), said


def interpreter_too_slow(result: EvalResult) -> bool:
    """A check under the Triton interpreter that stopped on its no-progress limit: the interpreter's speed on this
    host, not a verdict on the kernel. A decode-attention case of B 512 runs 512 x heads x splits programs in
    numpy; five checks sharing 2 cores hit the 180 s limit at their first such case, and check_candidate told the
    model "WRONG ... INCORRECT: timeout" about kernels it had not judged (2026-12-05). A kernel that really hangs
    is caught where it is timed, on the GPU."""
    c = result.correctness
    return (result.device.startswith("cpu") and c is not None and not c.ok and c.first_failure is not None
            and c.first_failure.reason == "timeout")


def _too_slow_text(result: EvalResult, shapes: int | None) -> str:
    c = result.correctness
    assert c is not None and c.first_failure is not None
    on = _shapes_phrase(shapes)
    where = f" at dims={c.first_failure.dims}" if c.first_failure.dims else ""
    return (f"ran under the Triton interpreter on {on}: NO VERDICT; {c.cases_run} case(s) passed, then the "
            f"interpreter made no progress within its time limit{where}: too slow on this host, which says nothing "
            "about the kernel (the round's evaluation on the GPU checks every case and catches a kernel that hangs)")


def _shapes_phrase(shapes: int | None) -> str:
    return f"{shapes} test shape(s)" if shapes else "the test shapes"


def what_ran(result: EvalResult, shapes: int | None) -> str:
    """"ran under the Triton interpreter on 3 test shapes: correct", said from the result itself."""
    where = ("under the Triton interpreter" if result.device.startswith("cpu") else f"on {result.device}")
    on = _shapes_phrase(shapes)
    if not result.build.ok:
        return f"did not run: the build failed ({'parse only' if result.device.startswith('cpu') else 'compiler'})"
    c = result.correctness
    if c is None:
        return f"started {where} on {on} but gave no verdict: {result.error or 'no result'}"
    verdict = f"correct ({c.cases_run} cases)" if c.ok else "WRONG (first failing case below)"
    from astra_sglang.harness.shared.suite import LEFT_TO_GPU

    left = next((f"; {n}" for n in c.notes if LEFT_TO_GPU in n), "")
    return f"ran {where} on {on}: {verdict}; not timed (the round's evaluation times it){left}"


def _suite_shapes(manifest: Manifest, spec: EvalSpec) -> int | None:
    from astra_sglang.harness.shared.suite import build_suite

    try:
        return len({tuple(sorted(c.dims.items())) for c in build_suite(manifest, to_eval_config(spec, timing=False),
                                                                        0, None)})
    except Exception:  # noqa: BLE001 - only the wording of the tool's answer depends on it
        return None


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
        from astra_sglang.harness.parent.tune_baseline import BASELINE_NAME, read_baseline

        found = read_baseline(self.op_dir)
        if found is not None:
            return TuneOutcome(baseline=found)
        return TuneOutcome(error=f"missing: no timing here and no GPU-measured {self.op_dir / BASELINE_NAME} (run "
                                 f"`astra-sglang tune {self.manifest.short_name}` on a GPU host)")

    def evaluate_many(self, items: list[tuple[str, Path | None]], spec: EvalSpec) -> list[EvalResult]:
        """A round's candidates (label, source) at once, results in order."""
        return [self.evaluate(label, candidate, spec) for label, candidate in items]

    def evaluate_round(self, items: list[tuple[str, Path | None]], spec: EvalSpec,
                       again: list[tuple[str, Path, str]] | None = None
                       ) -> tuple[list[EvalResult], list[EvalResult | None]]:
        """A round's candidates, and kernels that compete with them (label, source, the GPU their standing times
        are from) timed again beside them where this host has another GPU; None (or NOT_RETIMED) where not."""
        results = self.evaluate_many(items, spec)
        here = _this_gpu()
        return results, [self.evaluate(label, path, spec) if here and not same_gpu(here, gpu) else None
                         for label, path, gpu in again or []]

    def static(self, candidate: Path, spec: EvalSpec | None = None) -> CheckReport | None:
        source = Path(candidate).read_text()
        problem = check_source(source, self.op_dir, self.manifest) or _tune_problem(source, spec)
        return CheckReport(built=False, how="static", log=problem,
                           ran="nothing ran: the form check rejected it before any build") if problem else None


def _this_gpu() -> str:
    return platform_info.current().gpu or ""


def _measured_here(result: EvalResult, here: str) -> bool:
    """Whether a cached timed result came from this host's device: a run resumed on another GPU (or on a GPU after
    a CPU start) measures again, and a base re-timed on a new GPU is not answered by its old GPU's result."""
    there = gpu_of_text(result.device) or ""
    return same_gpu(there, here) if there and here else there == here


class LocalEvaluator(Evaluator):
    """The harness on this host; results cached by (candidate content, spec) so nothing is measured twice."""

    def __init__(self, op_dir: Path, manifest: Manifest | None = None, cache_dir: Path | None = None) -> None:
        super().__init__(op_dir, manifest)
        self.cache_dir = cache_dir
        self.description = "local harness"
        self._write_lock = threading.Lock()  # K coding agents' checks run in threads at once

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

    def _lookup(self, candidate: Path | None, spec: EvalSpec, timing: bool) -> EvalResult | None:
        here = _this_gpu() if timing else ""
        hit = self._cached(self._key(candidate, spec, timing))
        if hit is not None and (not timing or _measured_here(hit, here)):
            return hit
        # A full evaluation answers the check too; and on a device that cannot time, a correctness-only
        # result is the full evaluation, so the round's verdict reuses the coding agent's last check.
        other = self._cached(self._key(candidate, spec, not timing))
        if other is not None and (not timing or other.timing is None and other.device.startswith("cpu")
                                  and _measured_here(other, here)):
            return other
        return None

    def _run_many(self, candidates: list[Path | None], spec: EvalSpec, timing: bool) -> list[EvalResult]:
        found = [self._lookup(c, spec, timing) for c in candidates]
        missing = [c for c, r in zip(candidates, found) if r is None]
        if missing:
            from astra_sglang.harness import evaluate_many

            fresh = iter(evaluate_many(self.op_dir, missing, to_eval_config(spec, timing=timing)))
            for n, r in enumerate(found):
                if r is None:
                    found[n] = result = next(fresh)
                    if self.cache_dir is not None:
                        with self._write_lock:
                            atomic_write(self.cache_dir / f"{self._key(candidates[n], spec, timing)}.json",
                                         result.model_dump_json(indent=1))
        return [r for r in found if r is not None]

    def evaluate(self, label: str, candidate: Path | None, spec: EvalSpec) -> EvalResult:
        return self.evaluate_many([(label, candidate)], spec)[0]

    def evaluate_many(self, items: list[tuple[str, Path | None]], spec: EvalSpec) -> list[EvalResult]:
        """A round's verdict on this host. On a CPU host it leaves out what the interpreter computes wrongly, as
        the coding agent's check does: judging the interpreter's bf16 tl.dot garbage rejected correct fused-MoE
        candidates (`optimize --device cpu`); an op it cannot run at all stops with why, not with a false FAIL."""
        runnable, said = interpretable(self.manifest, spec)
        if runnable is None:
            raise AstraError(f"{self.manifest.short_name} cannot be evaluated on this host ({said}): run it on a GPU "
                             "host or through --eval-queue")
        results = self._run_many([c for _, c in items], runnable, timing=True)
        for result in results:
            if said and result.correctness is not None and said not in result.correctness.notes:
                result.correctness.notes.append(said)
        return results

    def sweep_baseline(self, spec: EvalSpec) -> TuneOutcome:
        from astra_sglang.harness import resolve_device

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
        static = self.static(candidate, spec)
        if static is not None:
            return static
        spec = spec.model_copy(update={"include_heldout": False})
        runnable, left_out = interpretable(self.manifest, spec)
        if runnable is None:
            return CheckReport(built=True, correct=None, how="harness", ran=f"not run here: {left_out}")
        report = check_from_result(self._run_many([candidate], runnable, False)[0],
                                   _suite_shapes(self.manifest, runnable))
        if left_out and report.ran:
            report.ran += f"; {left_out}"
        return report


# ------------------------------------------------------------------------------------------------ queue


RESULT_NAME = "result.json"
REQUEST_NAME = "request.json"
# a verdict the judge could not reach for reasons of its own (EvalResult.judge_error): kept here and the item
# left pending once, so a
# harness bug fixed between passes does not stand as the candidate's failure (round 2 of the decode-attention runs,
# H200 2026-12-05: every candidate "failed" on the judge's freed timing set). The second such result is final
CHECKER_ERROR_NAME = "result.checker-error.json"


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

    def _item(self, label: str, candidate: Path | None, spec: EvalSpec,
              retime_unless_on: str | None = None) -> tuple[Path, QueueRequest]:
        content = Path(candidate).read_text() if candidate is not None else None
        sha = sha256_text(content) if content is not None else None
        item_id = f"{self.run_id}--{label}"
        item_dir = self.queue_dir / item_id
        request = QueueRequest(item_id=item_id, run_id=self.run_id, label=label, op=self.manifest.short_name,
                               op_id=self.manifest.op_id, spec=spec, created=now_iso(), note=self.note,
                               candidate_file=("candidate" + Path(candidate).suffix) if candidate else None,
                               candidate_sha256=sha, retime_unless_on=retime_unless_on,
                               verdict_sha256=verdict_digest(self.manifest))
        existing = item_dir / REQUEST_NAME
        if existing.is_file():
            try:
                old = QueueRequest.model_validate_json(existing.read_text())
                if old.candidate_sha256 == sha and old.spec == spec and old.retime_unless_on == retime_unless_on:
                    return item_dir, old
            except ValueError:
                pass
            raise AstraError(f"queue item {item_dir} holds a different request; remove it or use a new run id")
        if content is not None:
            atomic_write(item_dir / request.candidate_file, content)  # type: ignore[operator]
        atomic_write(existing, request.model_dump_json(indent=1))
        return item_dir, request

    def evaluate(self, label: str, candidate: Path | None, spec: EvalSpec) -> EvalResult:
        return self.evaluate_many([(label, candidate)], spec)[0]

    def evaluate_round(self, items: list[tuple[str, Path | None]], spec: EvalSpec,
                       again: list[tuple[str, Path, str]] | None = None
                       ) -> tuple[list[EvalResult], list[EvalResult | None]]:
        """The kernels to time again go into the same batch as the candidates, each marked with its GPU: the GPU
        host times one only if it has another GPU (no trip is added either way), else answers NOT_RETIMED."""
        again = again or []
        results = self.evaluate_many([*items, *[(label, path) for label, path, _ in again]], spec,
                                     unless_on={label: gpu for label, _, gpu in again})
        return results[:len(items)], list(results[len(items):])

    def evaluate_many(self, items: list[tuple[str, Path | None]], spec: EvalSpec,
                      unless_on: dict[str, str] | None = None) -> list[EvalResult]:
        """Every item is written before any wait, so the GPU host sees the whole batch at once."""
        queued = [self._item(label, candidate, spec, (unless_on or {}).get(label)) for label, candidate in items]
        deadline = time.monotonic() + self.wait_s
        while True:
            results = [read_queue_result(item_dir, request) for item_dir, request in queued]
            if all(r is not None for r in results):
                return [r for r in results if r is not None]
            if time.monotonic() >= deadline:
                raise EvalPending(self.queue_dir, [q.item_id for (_, q), r in zip(queued, results) if r is None])
            time.sleep(min(self.poll_s, max(0.05, deadline - time.monotonic())))

    def sweep_baseline(self, spec: EvalSpec) -> TuneOutcome:
        """A ``tune`` item for the GPU host (answered by ``evaluate QUEUE`` with baseline.json); a CPU-sized
        spec (shapes=test) has nothing to time: the op folder's file or a line saying it is missing."""
        if spec.shapes == "test" or spec.device == "cpu":
            return super().sweep_baseline(spec)
        found = _same_sweep(self.op_dir, self.manifest, spec)
        if found is not None:
            return TuneOutcome(baseline=found)
        item_id = f"{self.run_id}--r000-tune"
        item_dir = self.queue_dir / item_id
        request = QueueRequest(item_id=item_id, run_id=self.run_id, label="r000-tune", op=self.manifest.short_name,
                               op_id=self.manifest.op_id, spec=spec, created=now_iso(), note=self.note, job="tune",
                               verdict_sha256=verdict_digest(self.manifest))
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
        static = self.static(candidate, spec)
        if static is not None:
            return static
        recipe = self.manifest.recipe
        if _gpu_here():
            return self.local.check(candidate, spec)
        if isinstance(recipe, TritonRecipe):  # the interpreter runs it here: a real verdict, no timing
            return self.local.check(candidate, spec.model_copy(update={"device": "cpu", "shapes": "test"}))
        if isinstance(recipe, CudaJitRecipe):
            return _compile_only(self.op_dir, self.manifest, candidate)
        return CheckReport(built=True, how="static", log="form checked only: this host cannot build or run it",
                           ran="form checked only: this host cannot build or run it")


def _tune_problem(source: str, spec: EvalSpec | None) -> str | None:
    """A malformed or over-budget TUNE, said before the round's evaluation (the GPU would only refuse it there)."""
    from astra_sglang.harness.parent.tune_space import MAX_CONFIGS, TuneError, find_space

    cap = int((spec.harness if spec is not None else {}).get("max_tune_configs", MAX_CONFIGS))
    try:
        find_space(source, cap)
    except TuneError as e:
        return f"tune: {e}"
    return None


def _gpu_here() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def _compile_only(op_dir: Path, manifest: Manifest, candidate: Path) -> CheckReport:
    """nvcc without a GPU: the build errors are the ones the coding agent must see before the queue trip, and
    ptxas's report (registers, spills, shared memory) is the one performance fact this host can give."""
    assert isinstance(manifest.recipe, CudaJitRecipe)
    arch = manifest.recipe.arch
    try:
        from astra_sglang.loader.cuda_build import build_cuda_module

        dtype = manifest.signature.dtypes[0]
        built = build_cuda_module(op_dir, manifest, dtype, kernel_source=candidate, load=False, arch=arch)
        report: BuildReport = built.report
        if not report.ok:
            return CheckReport(built=False, how="compile-only", log=report.log[-6000:],
                               ran=f"built with nvcc for {arch} ({dtype}): the build FAILED (compiler output below); "
                                   f"not run: no GPU here")
        return CheckReport(built=True, how="compile-only", ran=f"built with nvcc for {arch} ({dtype}): "
                           f"{_resources(report)}; not run: no GPU here (correctness is checked when the "
                           f"round is evaluated)")
    except AstraError as e:
        return CheckReport(built=False, how="compile-only", log=str(e)[-6000:],
                           ran=f"built with nvcc for {arch}: the build FAILED (compiler output below); "
                               f"not run: no GPU here")
    except Exception as e:  # toolchain missing, a loader bug: nothing was built, so the check must not say it was
        why = f"{type(e).__name__}: {e}"
        return CheckReport(built=False, how="compile-only", log=f"the nvcc build did not complete here ({why})",
                           ran=f"built with nvcc for {arch}: the build FAILED ({why}); not run: no GPU here")


def _resources(report: BuildReport) -> str:
    if not report.resources:
        return "no ptxas report"
    parts = []
    for r in report.resources:
        spills = (r.spill_stores_bytes or 0) + (r.spill_loads_bytes or 0)
        parts.append(f"{r.registers} registers, {spills} bytes spilled, {r.smem_bytes or 0} B smem "
                     f"({r.kernel[:80]})")
    return "; ".join(parts)


TUNE_RESULT_NAME = "baseline.json"


def _same_sweep(op_dir: Path, manifest: Manifest, spec: EvalSpec, gpu: str | None = None) -> SweepBaseline | None:
    """The op folder's GPU-measured tune_baseline.json when it is the sweep this spec would queue (same op and
    SGLang version, same timed shapes, same L2 mode): several runs sharing a queue, or a run after
    `astra-sglang tune`, then spend no GPU pass sweeping the original again (64 configs for decode_attention)."""
    from astra_sglang.harness.parent.tune_baseline import read_baseline
    from astra_sglang.harness.shared.suite import timed_shapes

    found = read_baseline(op_dir)
    if (found is None or canonical_op_id(found.op_id) != canonical_op_id(manifest.op_id)
            or found.sglang_version != manifest.sglang_version or found.configs_from):
        return None  # configs_from: part of the space (tune --prior), a bar too low for a run
    if f"{spec.mode} L2" not in found.method:
        return None
    measured_on = gpu_of_text(found.device)
    if gpu and not (measured_on and same_gpu(measured_on, gpu)):  # another GPU's sweep is not this one's bar
        return None
    try:
        wanted = sorted(sorted(d.items()) for d in timed_shapes(manifest, EvalConfig(shapes=spec.shapes, gpu=gpu)))
    except (AstraError, ValueError):
        return None
    have = sorted(sorted(s.dims.items()) for s in found.shapes)
    return found if wanted == have else None


def run_tune(op_dir: Path, config: EvalConfig, partial: Path | None = None) -> TuneOutcome:
    from astra_sglang.harness import sweep_baseline

    try:
        return TuneOutcome(baseline=sweep_baseline(op_dir, config, partial=partial))
    except AstraError as e:  # e.g. an op whose source exposes nothing to sweep: said, never fatal to the run
        return TuneOutcome(error=str(e))


def _tune_once(op_dir: Path, spec_json: str, config: EvalConfig, item_dir: Path) -> TuneOutcome:
    """A queue's tune job: the op folder's sweep of the same shapes when there is one, else the sweep, kept there
    as ``astra-sglang tune`` keeps it, so the next run's tune job (runs sharing a queue) reuses it. Its finished
    chunks are kept in the queue item (the folder that travels to the GPU and back), so a pass cut by its limit
    resumes there in the next pass."""
    from astra_sglang.harness.parent.tune_baseline import BASELINE_NAME, measured_on_gpu, partial_path

    gpu = _this_gpu() or None
    found = _same_sweep(op_dir, load_manifest(op_dir), EvalSpec.model_validate_json(spec_json), gpu)
    if found is not None:
        return TuneOutcome(baseline=found)
    partial = partial_path(item_dir / TUNE_RESULT_NAME, gpu)
    outcome = run_tune(op_dir, config, partial)
    if outcome.baseline is not None and measured_on_gpu(outcome.baseline):
        atomic_write(op_dir / BASELINE_NAME, outcome.baseline.model_dump_json(indent=1) + "\n")
    if outcome.baseline is not None:
        partial.unlink(missing_ok=True)
    return outcome


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
                  progress: Any = None, on_retry: Any = None, jobs: str = "all",
                  on_tune: Any = None) -> list[tuple[str, EvalResult]]:
    """Fill in every pending request (the GPU-host side of the queue). Returns what was evaluated.

    Pending evaluations of one op under one spec (a K-candidate round, or runs sharing a queue) go to the
    harness together, so their builds run in parallel on this host's cores and only the timing is serial;
    each result is written the moment its verdict is final, so a pass cut short keeps what it finished.
    Evaluations run in queue order, a batch where its first item stands, and the sweeps of originals (tune
    jobs) after all of them: no round waits for a sweep, every round waits for its candidates, and a sweep can
    outlast a pass (decode attention's 64 configs x 14 shapes did, 2026-12-04), so a pass that met the sweep
    first ran out of time before the candidates queued behind it. ``progress(request)`` is called as an
    item's work starts (a batch's items together), so what it prints is the order things run in;
    ``on_retry(request, error)`` when a judge error leaves an item pending for one more pass (CHECKER_ERROR_NAME);
    ``on_tune(request, outcome)`` when a sweep's answer is written (a pass of sweeps alone returns nothing else).
    ``jobs``: "evaluate" or "tune" takes only those requests (a sweep can be given a pass of its own)."""
    from astra_sglang.harness import evaluate_many

    done: list[tuple[str, EvalResult]] = []
    # (job, op, spec, tune item or "") -> its items; a dict keeps the order units first appear in: the run order
    units: dict[tuple[str, str, str, str], list[tuple[Path, QueueRequest, Path | None]]] = {}
    here: str | None = None
    for item_dir, request, result in list_queue(queue_dir):
        if result is not None or jobs not in ("all", request.job):
            continue
        op_dir = Path(extracted_root) / request.op
        manifest = load_manifest(op_dir)
        if canonical_op_id(manifest.op_id) != canonical_op_id(request.op_id):  # either written before issue 24
            raise AstraError(f"{item_dir}: request is for op {request.op_id}, {op_dir} holds {manifest.op_id}")
        held = verdict_digest(manifest)
        if request.verdict_sha256 and request.verdict_sha256 != held:
            raise AstraError(f"{item_dir}: run {request.run_id} was made against another contract of {request.op} "
                             f"(its shapes, files or tolerances: digest {request.verdict_sha256[:12]}; {op_dir} "
                             f"holds {held[:12]}): "
                             "its verdicts would judge other shapes. Evaluate it where the op folder is the run's "
                             "contract (pending/ holds revisions waiting for a GPU record)")
        if request.retime_unless_on:
            here = here if here is not None else _this_gpu()
            if here and same_gpu(here, request.retime_unless_on):
                answer = _not_retimed(request, manifest, here)
                atomic_write(item_dir / RESULT_NAME, answer.model_dump_json(indent=1))
                done.append((request.item_id, answer))
                continue
        spec = request.spec if device is None else request.spec.model_copy(update={"device": device})
        tune = str(item_dir) if request.job == "tune" else ""  # a tune job runs alone
        candidate = item_dir / request.candidate_file if request.candidate_file else None
        units.setdefault((request.job, request.op, spec.model_dump_json(), tune), []).append(
            (item_dir, request, candidate))
    for (job, op, spec_json, _), items in sorted(units.items(), key=lambda u: u[0][0] == "tune"):  # stable
        if progress is not None:
            for _, request, _ in items:
                progress(request)
        config = to_eval_config(EvalSpec.model_validate_json(spec_json))
        if job == "tune":
            outcome = _tune_once(Path(extracted_root) / op, spec_json, config, items[0][0])
            atomic_write(items[0][0] / TUNE_RESULT_NAME, outcome.model_dump_json(indent=1))
            if on_tune is not None:
                on_tune(items[0][1], outcome)
            continue

        def keep(i: int, result: EvalResult, items: list[tuple[Path, QueueRequest, Path | None]] = items) -> None:
            item_dir, request, _ = items[i]
            if result.judge_error and not (item_dir / CHECKER_ERROR_NAME).exists():
                atomic_write(item_dir / CHECKER_ERROR_NAME, result.model_dump_json(indent=1))
                if on_retry is not None:
                    on_retry(request, result.error or "")
                return
            atomic_write(item_dir / RESULT_NAME, result.model_dump_json(indent=1))
            done.append((request.item_id, result))

        evaluate_many(Path(extracted_root) / op, [c for _, _, c in items], config, on_result=keep)
    return done


def _not_retimed(request: QueueRequest, manifest: Manifest, gpu: str) -> EvalResult:
    """The answer to a base re-time on the GPU the base was timed on: nothing ran, its own times stand."""
    return EvalResult(op_id=request.op_id, candidate=request.candidate_file, candidate_sha256=request.candidate_sha256,
                      device=gpu, sglang_version=manifest.sglang_version,
                      build=BuildReport(ok=False, log="not built: no re-time needed"),
                      error=f"{NOT_RETIMED}: this host's GPU ({gpu}) is the one its times came from")


def queue_status(queue_dir: Path) -> dict[str, int]:
    items = list_queue(queue_dir)
    return {"pending": sum(1 for _, _, r in items if r is None), "done": sum(1 for _, _, r in items if r is not None)}
