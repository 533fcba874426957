"""``evaluate`` / ``evaluate_many``: build candidates in parallel, then have a checker judge each one.

The parent never imports or runs candidate code: CUDA candidates are compiled here (nvcc in threads) and only
loaded inside the candidate's worker; Triton candidates are only parsed here. Each candidate gets a trusted
checker process (``judge.process``) that runs the candidate's worker and decides the verdict (docs/harness.md).
They run one after another on the GPU so their timings do not disturb each other. The copy ceiling is
measured by the first checker and reused.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from astra_sglang import pyast
from astra_sglang.contract.base import sha256_file
from astra_sglang.contract.eval_config import EvalConfig
from astra_sglang.contract.op import Manifest, ManifestError, load_manifest, states_serving
from astra_sglang.contract.result import (
    JUDGE_ERROR,
    BuildReport,
    CorrectnessReport,
    EvalResult,
    FailedCase,
    ShapeTiming,
    SweepReport,
    TimingReport,
)
from astra_sglang.errors import AstraError
from astra_sglang.harness.parent.heldout import heldout_secret
from astra_sglang.harness.parent.screen import screen_report
from astra_sglang.harness.shared.isolation import (
    WorkerOutcome,
    crash_lines,
    known_ceiling,
    remember_ceiling,
    run_checker,
)
from astra_sglang.harness.shared.protocol import TIMING_BATCH, CheckJob, TimedShape
from astra_sglang.harness.shared.suite import (
    build_suite,
    largest_numel,
    left_to_gpu_note,
    served_on_note,
    timed_shapes,
    timing_dtypes,
)


def resolve_device(config: EvalConfig) -> str:
    if config.device != "auto":
        if config.device == "cuda" and not _cuda_available():
            raise AstraError("--device cuda but no CUDA GPU is visible")
        return config.device
    return "cuda" if _cuda_available() else "cpu"


def with_gpu(config: EvalConfig, device: str) -> EvalConfig:
    """``config`` with the GPU model it runs on named (EvalConfig.gpu), on CUDA where the caller did not name one."""
    if device != "cuda" or config.gpu:
        return config
    from astra_sglang import platform_info

    return config.model_copy(update={"gpu": platform_info.current().gpu})


def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001
        return False



def _load(op_dir: Path) -> Manifest:
    try:
        return load_manifest(op_dir)
    except ManifestError as e:
        raise AstraError(str(e)) from None


def _specs(op_dir: Path, manifest: Manifest, source: Path | None, dtypes: list[str],
           config: EvalConfig) -> list[Any]:
    from astra_sglang.loader.cuda_build import CudaBuildSpec

    return [CudaBuildSpec.from_recipe(op_dir, manifest, dt, kernel_source=source, cache_dir=config.cache_dir,
                                      arch=config.arch) for dt in dtypes]


def _build_cuda(op_dir: Path, manifest: Manifest, sources: list[Path | None], dtypes: list[str],
                config: EvalConfig, workers: int | None = None) -> list[BuildReport]:
    """Compile (no load) every source for every dtype in one parallel batch; one report per source: ok only if
    all its dtypes built, resources of the first dtype. A candidate's module that imports a symbol outside the
    allowlist (``module_imports``) is refused here, before any process loads it (with the screen: both are the
    static checks ``EvalConfig.screen`` switches off to test the defences behind them)."""
    from astra_sglang.harness.parent.module_imports import check_module
    from astra_sglang.loader.cuda_build import BuildError, build_batch

    specs: list[Any] = []
    bad: dict[int, BuildReport] = {}
    for i, src in enumerate(sources):
        try:
            specs += [(i, s) for s in _specs(op_dir, manifest, src, dtypes, config)]
        except AstraError as e:  # a missing candidate file or dtype: that source's verdict, not the batch's
            bad[i] = BuildReport(ok=False, log=str(e))
    outcomes = build_batch([s for _, s in specs], max_workers=workers)
    per_source: dict[int, list[BuildReport]] = {}
    for (i, spec), out in zip(specs, outcomes):
        if isinstance(out, BuildError):
            rep = out.report.model_copy(update={"ok": False, "log": f"[{spec.dtype}] {out.report.log}"})
        elif isinstance(out, AstraError):
            rep = BuildReport(ok=False, log=f"[{spec.dtype}] {out}")
        else:
            rep = out.report
            refusal = check_module(spec, out.so_path) if spec.kernel_source is not None and config.screen else None
            if refusal is not None:
                rep = BuildReport(ok=False, seconds=rep.seconds, log=refusal)
        per_source.setdefault(i, []).append(rep)
    reports = []
    for i in range(len(sources)):
        rs = per_source.get(i, [])
        failed = bad.get(i) or next((r for r in rs if not r.ok), None)
        reports.append(failed if failed is not None else BuildReport(
            ok=True, seconds=sum(r.seconds for r in rs), log=rs[0].log if rs else "",
            resources=rs[0].resources if rs else [], cached=all(r.cached for r in rs)))
    return reports


def _check_triton(source: Path) -> BuildReport:
    """Parse only (never import candidate code in the caller); ``screen`` has already judged what the code may
    reach, and import errors surface in the worker."""
    t0 = time.monotonic()
    try:
        pyast.parse(source.read_text(), filename=str(source))
    except (OSError, SyntaxError, ValueError) as e:
        return BuildReport(ok=False, seconds=time.monotonic() - t0, log=f"{type(e).__name__}: {e}")
    return BuildReport(ok=True, seconds=time.monotonic() - t0)


def build_all(op_dir: Path, manifest: Manifest, candidates: list[Path | None], dtypes: list[str],
              config: EvalConfig) -> list[BuildReport]:
    """Screened first (a rejected candidate is never built); see ``_build_screened``."""
    screened = [screen_report(c, op_dir, manifest) if c is not None and config.screen else None for c in candidates]
    built = _build_screened(op_dir, manifest, [c if s is None else None for c, s in zip(candidates, screened)],
                            dtypes, config)
    return [s if s is not None else b for s, b in zip(screened, built)]


def _build_screened(op_dir: Path, manifest: Manifest, candidates: list[Path | None], dtypes: list[str],
                    config: EvalConfig) -> list[BuildReport]:
    """The original first (its failure is the user's problem, not a candidate's), then candidates in parallel."""
    if manifest.source_kind == "cuda_jit":
        (orig,) = _build_cuda(op_dir, manifest, [None], dtypes, config)
        if not orig.ok:
            raise AstraError(f"the original {manifest.short_name} does not build: {orig.log[:2000]}")
        sources: list[Path | None] = [c for c in candidates if c is not None]
        # one nvcc per dtype per candidate at once, up to build_workers candidates' worth
        built = iter(_build_cuda(op_dir, manifest, sources, dtypes, config,
                                 workers=max(1, config.build_workers) * max(1, len(dtypes))))
        return [next(built) if c is not None else orig for c in candidates]
    if manifest.source_kind == "triton":
        return [_check_triton(c) if c is not None else BuildReport(ok=True) for c in candidates]
    raise AstraError(f"{manifest.short_name}: source kind {manifest.source_kind!r} cannot be evaluated")


def build_baselines(op_dir: Path, manifest: Manifest, dtypes: list[str], config: EvalConfig,
                    cuda: bool = True) -> list[str]:
    """Names of the baselines to time: the CUDA ones that build for the timed dtypes (a failure only drops the
    baseline; only with ``cuda``), and SGLang's eager torch code, which needs no build."""
    if not config.time_baselines:
        return []
    from astra_sglang.contract.op import CudaJitRecipe, TorchRecipe
    from astra_sglang.loader.cuda_build import CudaBuildSpec, build_batch

    names = []
    for b in manifest.baselines:
        if isinstance(b.recipe, TorchRecipe):
            names.append(b.name)
        if not isinstance(b.recipe, CudaJitRecipe) or not cuda:
            continue
        try:
            specs = [CudaBuildSpec.from_recipe(op_dir, manifest, dt, recipe=b.recipe, cache_dir=config.cache_dir,
                                               arch=config.arch) for dt in dtypes if dt in b.recipe.template_args]
        except AstraError:
            continue
        if not any(isinstance(o, AstraError) for o in build_batch(specs)):
            names.append(b.name)
    return names


def evaluate(op_dir: Path, candidate: Path | None, config: EvalConfig | None = None) -> EvalResult:
    return evaluate_many(op_dir, [candidate], config)[0]  # type: ignore[list-item]


def evaluate_many(op_dir: Path, candidates: list[Path | None], config: EvalConfig | None = None,
                  on_result: Callable[[int, EvalResult], None] | None = None) -> list[EvalResult]:
    """One EvalResult per candidate (None = the original alone), in order; never raises for a bad candidate.

    ``on_result(i, result)`` is called as each candidate's verdict is final, so a caller can keep it before the
    rest of the batch is timed (a queue pass cut short by its time limit keeps what it finished)."""
    config = config or EvalConfig()
    op_dir = Path(op_dir).resolve()
    manifest = _load(op_dir)
    device = resolve_device(config)
    config = with_gpu(config, device)
    if device == "cpu" and manifest.source_kind == "cuda_jit":
        raise AstraError(f"{manifest.short_name} is a CUDA kernel: checking and timing it needs a GPU. Run this on a "
                         "GPU host, or optimize with `--eval-queue DIR` here and run `astra-sglang evaluate DIR` there")
    candidates = [Path(c).resolve() if c is not None else None for c in candidates]
    for c in candidates:
        if c is not None and not c.is_file():
            raise AstraError(f"candidate {c} does not exist")
    base_seed = config.seed if config.seed is not None else random.SystemRandom().getrandbits(48)
    submitted = list(candidates)
    # a Triton candidate's sweep takes GPU-minutes (decode_attention: ~4 per candidate on the H200), so each one is
    # swept, built and judged before the next is swept: a pass cut short keeps every verdict it reached; CUDA
    # candidates (never swept) are built up front, in parallel
    lazy = manifest.source_kind == "triton"
    secret = heldout_secret() if config.include_heldout else None
    cases = build_suite(manifest, config, base_seed, secret)
    shapes = timed_shapes(manifest, config)
    if config.max_timed_shapes is not None:
        shapes = sorted(shapes, key=lambda d: largest_numel(manifest, d))[-config.max_timed_shapes:]
    t_dtypes = timing_dtypes(manifest, config)
    dtypes = sorted({c.dtype for c in cases} | set(t_dtypes))
    t0 = time.monotonic()
    builds: list[BuildReport | None] = [None] * len(candidates)
    if not lazy:
        builds = list(build_all(op_dir, manifest, candidates, dtypes, config))
    # where the manifest says what SGLang serves, a candidate is also checked against it (every checked dtype)
    serving = states_serving(manifest)
    baselines = build_baselines(op_dir, manifest, dtypes if serving else t_dtypes, config,
                                cuda=device == "cuda") if config.timing or serving else []
    build_wall = time.monotonic() - t0
    warmup, rep = config.timing_protocol()
    gpu_note = "; ".join(n for n in (left_to_gpu_note(manifest, config), served_on_note(manifest, config)) if n)
    results: list[EvalResult] = []
    for given, build in zip(submitted, builds):
        sweep = _tune(op_dir, manifest, given, config, device, base_seed)
        start = time.monotonic()  # after the sweep: its own wall_s is added below
        cand = Path(sweep.frozen_path) if isinstance(sweep, SweepReport) and sweep.frozen_path else given
        if build is None:
            build = build_all(op_dir, manifest, [cand], dtypes, config)[0]
        res = EvalResult(op_id=manifest.op_id, candidate=str(given) if given else None,
                         candidate_sha256=sha256_file(given) if given else None,
                         device="cpu (TRITON_INTERPRET=1)" if device == "cpu" else "cuda",
                         sglang_version=manifest.sglang_version, build=build,
                         sweep=sweep if isinstance(sweep, SweepReport) else None)
        if _refused_before_the_judge(res, sweep, build):
            _done(results, res, on_result)
            continue
        job = CheckJob(op_dir=str(op_dir), manifest=manifest, candidate=str(cand) if cand else None,
                       device=device, config=config.model_copy(update={"simulate_timing": config.simulate_timing
                                                                       and device == "cpu"}),
                       warmup=warmup, rep=rep, timing_seed=base_seed ^ 0x5EED, cases=cases, timed_shapes=shapes,
                       timing_dtypes=t_dtypes, ceiling=known_ceiling(device, config.copy_ceiling_gbps),
                       baselines=baselines)
        # the checker waits timeout_s on a silent candidate before it reports the hang itself
        outcome = run_checker(job, timeout_s=config.timeout_s + 60.0, max_wall_s=config.max_wall_s)
        _fill(res, outcome, config, device)
        res.wall_s += time.monotonic() - start + (build.seconds if len(candidates) == 1 or lazy
                                                  else build_wall / len(candidates))
        _done(results, res, on_result, gpu_note)
    return results


def _refused_before_the_judge(res: EvalResult, sweep: SweepReport | str | None, build: BuildReport) -> bool:
    """Fill ``res`` for a candidate that never reaches the judge: a malformed TUNE (it does not build), a sweep
    none of whose configs passed, or a failed build. False (and the sweep's time counted) for one that does."""
    if isinstance(sweep, str):
        res.build, res.error = BuildReport(ok=False, log=sweep), f"build failed: {sweep}"
        return True
    if res.sweep is not None and res.sweep.frozen_path is None:
        first = next((c.failure for c in res.sweep.configs if c.failure), "") or ""
        res.error = f"tune: none of the {len(res.sweep.configs)} configs passed (first: {first[:300]})"
        res.correctness = CorrectnessReport(ok=False, first_failure=FailedCase(reason="tune", detail=first))
        res.wall_s = res.sweep.wall_s
        return True
    if res.sweep is not None:
        res.wall_s += res.sweep.wall_s
    if not build.ok:
        res.error = "build failed: " + (build.log.strip().splitlines() or ["(no compiler output)"])[-1][:300]
        res.wall_s = build.seconds
        return True
    return False


def _done(results: list[EvalResult], res: EvalResult, on_result: Callable[[int, EvalResult], None] | None,
          note: str = "") -> None:
    if note and res.correctness is not None:
        res.correctness.notes.append(note)
    results.append(res)
    if on_result is not None:
        on_result(len(results) - 1, res)


def _tune(op_dir: Path, manifest: Manifest, cand: Path | None, config: EvalConfig, device: str,
          seed: int) -> SweepReport | str | None:
    """The candidate's sweep (a Triton candidate declaring TUNE; ``frozen_path`` None when no config passed), the
    one line saying why its TUNE is malformed, or None (nothing to tune)."""
    from astra_sglang.harness.parent.sweep import declared_space, tune_candidate
    from astra_sglang.harness.parent.tune_space import TuneError

    if cand is None or manifest.source_kind != "triton" or cand.suffix != ".py":
        return None
    try:
        space = declared_space(cand, config.max_tune_configs)
    except TuneError as e:
        return f"tune: {e}"
    return None if space is None else tune_candidate(op_dir, manifest, cand, space, config, device, seed)


def _progress_case(outcome: WorkerOutcome) -> dict[str, Any]:
    p = outcome.last_progress
    if p is None:
        return {}
    if p.heldout:
        return {"heldout": True}
    if p.case is not None:
        return dict(dims=p.case.dims, dtype=p.case.dtype, distribution=p.case.distribution, seed=p.case.seed)
    return {"dims": p.dims, "dtype": p.dtype} if p.dims else {}


def _passed_before(outcome: WorkerOutcome) -> tuple[int, int]:
    """(cases, held-out cases) the suite got through before the checker died, from its progress: the cases run
    in order and the first failure ends the suite, so every case before the last one started passed. A check
    under the interpreter whose judge went silent in SGLang's original at the last, costliest case (decode
    attention's B = 512) said "0 case(s) passed" after 55 had (2026-12-05)."""
    started = [p for p in outcome.progress if p.step == "check"]
    last = outcome.last_progress
    passed = started[:-1] if last is not None and last.step == "check" else started
    return len(passed), sum(p.heldout for p in passed)


def _fill(res: EvalResult, outcome: WorkerOutcome, config: EvalConfig, device: str) -> None:
    if outcome.died is not None:  # the checker itself died or hung (the original, or a candidate that killed it)
        step = outcome.last_progress.step if outcome.last_progress else "start-up"
        reason = "timeout" if outcome.died == "timeout" else "crash"
        tail = crash_lines(outcome.log_tail, res.candidate)
        detail = f"{outcome.detail} during {step}" + (("; checker output: " + " | ".join(tail)) if tail else "")
        run, heldout = _passed_before(outcome)
        res.correctness = CorrectnessReport(ok=False, cases_run=run, heldout_cases_run=heldout,
                                            first_failure=FailedCase(reason=reason, detail=detail[:3000],
                                                                     **_progress_case(outcome)))
        res.error = f"{reason}: {outcome.detail} during {step}"
        return
    if outcome.error is not None:
        res.error = f"{JUDGE_ERROR}: {outcome.error.error[:1000]}"
        res.correctness = CorrectnessReport(ok=False, first_failure=FailedCase(
            reason="launch error", detail=(outcome.error.error + "\n" + outcome.error.traceback)[:3000],
            **_progress_case(outcome)))
        return
    r = outcome.result
    assert r is not None
    if r.build_error:
        res.build = BuildReport(ok=False, seconds=res.build.seconds, log=r.build_error[:20000])
        res.error = "build failed: " + (r.build_error.splitlines() or [""])[0][:300]
        return
    res.device = r.device
    res.sandbox = r.sandbox
    remember_ceiling(device, r.ceiling)
    if r.correctness is not None:
        res.correctness = r.correctness.model_copy(update={"notes": r.notes[:20]})
        f = r.correctness.first_failure
        if f is not None and f.reason in ("crash", "timeout"):  # the candidate's worker died or hung
            res.error = f"{f.reason}: {f.detail.split('; worker output')[0]}"[:1000]
    if device != "cuda" and not config.simulate_timing:
        res.timing = None
        return
    if r.timing is not None and r.ceiling is not None:
        res.timing = _timing_report(r.timing, r.ceiling, config, res.candidate is not None)


def _timing_report(rows: list[TimedShape], ceiling: float, config: EvalConfig, has_cand: bool) -> TimingReport:
    warmup, rep = config.timing_protocol()
    shapes = [row.row for row in rows]
    suspect = [f"{row.row.dims} {row.row.dtype}: {row.suspect_reason}" for row in rows if row.suspect_reason]
    # a suspect number is never a win: it counts at most 1.0 in the geometric mean
    vs_orig = _geomean([s.speedup for s in shapes if not s.original_refused], shapes, has_cand)
    served = any(s.served_by for s in shapes)  # the op states what SGLang serves: that is the headline
    geo = _geomean([s.served_speedup for s in shapes], shapes, has_cand) if served else vs_orig
    methods = sorted({row.method for row in rows})
    rot = f"inputs rotated over > {config.cold_l2_factor:g}x L2" if config.mode == "cold" else "same buffers (warm L2)"
    interleave = (f"ABBA-interleaved with the original in batches of {TIMING_BATCH}, candidate in its own process, "
                  "each batch checked against the wall clock, ") if has_cand else ""
    method = f"{' / '.join(methods)}, {warmup} warm-up, {rep} timed per side, {interleave}{rot}; medians"
    extra = len(config.extra_timed_shapes)
    shape_set = (f"{extra} extra only" if extra and config.only_extra_timed
                 else f"{config.shapes} + {extra} extra" if extra else None)
    return TimingReport(mode=config.mode, method=method, copy_ceiling_gbps=ceiling, shapes=shapes,
                        geomean_speedup=geo, geomean_vs_original=vs_orig if served else None, suspect=suspect,
                        shape_set=shape_set)


def _geomean(speedups: list[float | None], shapes: list[ShapeTiming], has_cand: bool) -> float | None:
    """Of the shapes' speedups (one per shape, None = not timed there); a suspect shape counts at most 1.0."""
    vals = [min(v, 1.0) if s.verdict == "suspect" else v for v, s in zip(speedups, shapes) if v]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals and has_cand else None
