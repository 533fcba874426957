"""What agents are shown: the manifest, results and history turned into their typed inputs.

Everything an agent sees passes through here, which is where held-out data is kept out: results shown are
test-shape evaluations only, and held-out verdicts never enter a RoundRecord.
"""

from __future__ import annotations

from pathlib import Path

from astra_sglang.agents.schemas import (
    CandidateView,
    DimValue,
    OpView,
    ProposedCase,
    ResultView,
    RoundView,
    ShapeLine,
)
from astra_sglang.contract.op import CudaJitRecipe, Manifest, TritonRecipe, complete_dims
from astra_sglang.contract.result import EvalResult, ShapeTiming
from astra_sglang.loop.records import RoundRecord

DISTRIBUTIONS = ["normal", "wide", "tiny", "zeros", "special"]


def form_of(manifest: Manifest) -> str:
    r = manifest.recipe
    if isinstance(r, TritonRecipe):
        return (f"a self-contained Triton .py file defining the launch wrapper `{r.wrapper}` (same parameters and "
                f"return value) and its @triton.jit kernels; called as "
                + (f"{r.adapter.partition(':')[2]}({r.wrapper}, {', '.join(r.call)}) by the op folder's "
                   f"{r.adapter.partition(':')[0]}, which builds the wrapper's arguments (see its source)"
                   if r.adapter else f"{r.wrapper}({', '.join(r.call)})"))
    if isinstance(r, CudaJitRecipe):
        exports = ", ".join(f"{e.name} -> {e.symbol}" for e in r.exports)
        return (f"a CUDA .cuh replacing {r.sources[0]}, compiled by nvcc for {r.arch} and exported through "
                f"tvm-ffi as: {exports}; entry `{r.entry}` called as ({', '.join(r.call)})")
    return "a source file of the same form as the current kernel"


def op_view(manifest: Manifest) -> OpView:
    sig = manifest.signature
    dims = []
    for d in sig.dims:
        limits = [f"min {d.min}"]
        if d.max is not None:
            limits.append(f"max {d.max}")
        if d.multiple_of > 1:
            limits.append(f"multiple of {d.multiple_of}")
        dims.append(f"{d.name}: {d.meaning} ({', '.join(limits)})")
    tensors = []
    for t in sig.tensors:
        extra = f", special values {t.special_values}" if t.special_values else ""
        tensors.append(f"{t.name}: {t.role} [{', '.join(t.shape)}] {t.dtype}{extra}")
    scalars = [f"{s.name}: {s.type} (default {s.default!r}) {s.meaning}".strip() for s in sig.scalars]
    tol = {k: f"atol {v.atol}, rtol {v.rtol}" for k, v in manifest.tolerances.items()}
    seen: list[dict[str, int]] = []
    for s in manifest.shapes:
        if s.dims not in seen:
            seen.append(dict(s.dims))
    return OpView(op_id=manifest.op_id, short_name=manifest.short_name, form=form_of(manifest), dims=dims,
                  tensors=tensors, scalars=scalars, dtypes=list(sig.dtypes), relations=list(sig.relations),
                  tolerances=tol, shapes=seen, distributions=DISTRIBUTIONS)


def failure_text(result: EvalResult) -> str | None:
    if not result.build.ok:
        return "build failed: " + (result.build.log or result.error or "")[-1500:]
    c = result.correctness
    if c is not None and c.first_failure is not None:
        f = c.first_failure
        bits = [f.reason, f.detail, f"dims={f.dims}" if f.dims else "", f"dtype={f.dtype}" if f.dtype else "",
                f"distribution={f.distribution}" if f.distribution else "",
                f"max_abs_err={f.max_abs_err:.3g}" if f.max_abs_err is not None else ""]
        return ", ".join(b for b in bits if b)
    return result.error


def result_view(result: EvalResult) -> ResultView:
    shapes: list[ShapeLine] = []
    t = result.timing
    if t is not None:
        for s in t.shapes:
            shapes.append(ShapeLine(dims=s.dims, dtype=s.dtype, original_us=s.original_us, candidate_us=s.candidate_us,
                                    speedup=s.speedup,
                                    pct_of_copy_ceiling=s.candidate_pct_ceiling if s.candidate_pct_ceiling is not None
                                    else s.original_pct_ceiling))
    resources = [f"{r.kernel}: registers={r.registers}, spill stores={r.spill_stores_bytes} B, spill loads="
                 f"{r.spill_loads_bytes} B, smem={r.smem_bytes} B, stack={r.stack_frame_bytes} B"
                 for r in result.build.resources]
    correct = result.correctness.ok if result.correctness is not None else None
    return ResultView(
        device=result.device, built=result.build.ok, build_log=(result.build.log or "")[-3000:] if not result.build.ok else "",
        correct=correct, cases_run=result.correctness.cases_run if result.correctness else 0,
        first_failure=failure_text(result) if correct is False or not result.build.ok else None,
        geomean_speedup=t.geomean_speedup if t else None, timing_method=t.method if t else None,
        copy_ceiling_gbps=t.copy_ceiling_gbps if t else None, shapes=shapes, resources=resources, error=result.error)


def timing_text(result: EvalResult) -> str:
    t = result.timing
    if t is None:
        return (f"No timing on this device ({result.device}): correctness only. Diagnose from the source and the "
                f"resource report; do not invent numbers.")
    lines = [f"device: {result.device}; method: {t.method}; copy ceiling {t.copy_ceiling_gbps:.0f} GB/s",
             "dims | dtype | original us | current us | speedup | orig %ceil | cur %ceil | verdict"]
    for s in t.shapes:
        cur = f"{s.candidate_us:.2f}" if s.candidate_us is not None else "-"
        sp = f"{s.speedup:.3f}" if s.speedup is not None else "-"
        cp = f"{s.candidate_pct_ceiling:.0f}%" if s.candidate_pct_ceiling is not None else "-"
        lines.append(f"{s.dims} | {s.dtype} | {s.original_us:.2f} | {cur} | {sp} | {s.original_pct_ceiling:.0f}% | {cp} "
                     f"| {s.verdict} (spread {s.spread_pct:.1f}%, {s.bytes_moved} B)")
    if t.geomean_speedup is not None:
        lines.append(f"geomean speedup: {t.geomean_speedup:.3f}")
    if t.suspect:
        lines.append("SUSPECT: " + "; ".join(t.suspect))
    return "\n".join(lines)


def resources_text(result: EvalResult) -> str:
    if not result.build.resources:
        return f"no resource report for this build on {result.device}"
    return "\n".join(result_view(result).resources)


def shape_times(result: EvalResult) -> list[ShapeTiming]:
    return list(result.timing.shapes) if result.timing is not None else []


def round_view(record: RoundRecord) -> RoundView:
    return RoundView(
        round=record.round, base_round=record.base_round, status=record.status, correct=record.correct,
        geomean_speedup=record.geomean_speedup,
        diagnosis=record.diagnosis.summary if record.diagnosis else record.diagnosis_text,
        suggestions=[f"{s.title}: {s.change}" for s in record.suggestions],
        changes=record.changes, failure=record.first_failure or record.error)


def candidate_history(entries: list[RoundRecord]) -> list[CandidateView]:
    """Every earlier candidate for a K-candidate round's planner: the ones that may win, fastest first; then
    correct ones without a trusted speedup; then the failures, each with its reason."""
    tried = [e for e in entries if e.round > 0]

    def order(e: RoundRecord) -> tuple[int, float, int, int]:
        timed = bool(e.correct) and not e.timing_suspect and e.geomean_speedup is not None
        group = 0 if timed else (1 if e.correct else 2)
        return group, -(e.geomean_speedup or 0.0) if timed else 0.0, e.round, e.candidate or 0

    return [CandidateView(**round_view(e).model_dump(), candidate=e.candidate) for e in sorted(tried, key=order)]


def validate_suite(cases: list[ProposedCase], manifest: Manifest, max_elems: int,
                   max_cases: int = 24) -> tuple[list[ProposedCase], list[str]]:
    """Keep the proposed cases the contract allows; say why each other one was dropped."""
    from astra_sglang.harness.shared.suite import largest_numel

    dims = {d.name: d for d in manifest.signature.dims}
    accepted: list[ProposedCase] = []
    rejected: list[str] = []
    for i, case in enumerate(cases):
        values = {d.name: d.value for d in case.dims}
        full = complete_dims(manifest, values)
        if full != values:  # proposed before a dim was added: it keeps its meaning, written out
            case = case.model_copy(update={"dims": [*case.dims, *(DimValue(name=k, value=v)
                                                                  for k, v in full.items() if k not in values)]})
            values = full
        problem = None
        if set(values) != set(dims):
            problem = f"dims {sorted(values)} != signature dims {sorted(dims)}"
        elif case.dtype not in manifest.signature.dtypes:
            problem = f"dtype {case.dtype} not in {manifest.signature.dtypes}"
        else:
            for name, v in values.items():
                d = dims[name]
                if v < d.min or (d.max is not None and v > d.max) or v % max(1, d.multiple_of):
                    problem = f"{name}={v} outside its constraints"
                    break
        if problem is None:
            try:
                if largest_numel(manifest, values) > max_elems:
                    problem = f"too large for this suite (> {max_elems} elements)"
            except Exception as e:  # a shape expression the dims cannot satisfy
                problem = f"shape not computable: {e}"
        if problem is None and len(accepted) >= max_cases:
            problem = f"more than {max_cases} cases"
        if problem:
            rejected.append(f"case {i} {values} {case.dtype}/{case.distribution}: {problem}")
        else:
            accepted.append(case)
    return accepted, rejected


def source_of(record: RoundRecord, original: Path) -> str:
    return record.source if record.source is not None else original.read_text()
