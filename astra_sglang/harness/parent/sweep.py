"""Sweeps: many variants of one source, checked and timed in one worker, the best config per shape chosen.

Two users. ``tune_candidate`` (called by ``evaluate_many`` for a Triton candidate that declares ``TUNE``):
every config becomes a variant source (``tune_space.py``), each is screened, the survivors run a quick case
set and are timed against the original in one sweep job (``sweep_checks.py``), the choice is frozen into the
source as a ``TUNED`` table, and that frozen source is what the normal evaluation then checks in full and what
is shipped. ``sweep_variants`` is the shared part, also used by ``astra-sglang tune OP`` (``tune_baseline.py``)
to sweep the original's own launch parameters. The verdict on every variant comes from the trusted judge.
"""

from __future__ import annotations

import math
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from astra_sglang.contract.base import Model, sha256_text, write_atomic
from astra_sglang.contract.eval_config import EvalConfig
from astra_sglang.contract.op import Manifest, manifest_digest
from astra_sglang.contract.result import (
    SweepChoice,
    SweepConfig,
    SweepReport,
    SweepShape,
    TuneValue,
)
from astra_sglang.harness.parent.screen import screen_report
from astra_sglang.harness.parent.tune_space import MAX_CONFIGS, TuneSpace, find_space, freeze, variant_source
from astra_sglang.harness.shared.isolation import known_ceiling, remember_ceiling, run_checker
from astra_sglang.harness.shared.protocol import CaseSpec, CheckJob, VariantOutcome
from astra_sglang.harness.shared.suite import (
    _dim_values,
    _is_discrete,
    largest_numel,
    timed_shapes,
    timing_dtypes,
)

SWEEP_WARMUP, SWEEP_REP = 10, 50  # per side per shape per config; the frozen source is timed in full afterwards
# An untimed sweep (the CPU interpreter) can only quick-check configs and then picks one arbitrarily; the GPU sweep
# quick-checks every config again before timing it. Checking them all here cost a coding agent 180 s of its check
# (decode attention, 18 configs: the check timed out) and made it shrink the TUNE space the GPU would have swept.
UNTIMED_SWEEP_CONFIGS = 4
CPU_NOTE = ("CPU: no meaningful timing here (host timers or none): the choice is arbitrary among the configs "
            "that passed the checks; time on a GPU to tune")
Config = dict[str, TuneValue]


def quick_cases(manifest: Manifest, config: EvalConfig, seed: int) -> list[CaseSpec]:
    """A few small shapes in one dtype, normal values: enough to drop a config that is wrong, cheap enough for
    every config. CPU (``shapes=test``): the test shapes. Otherwise the smallest manifest shape of each
    combination of the op's few-valued dims (head_dim 64/128/...), at most four, plus the smallest shape."""
    dtype = timing_dtypes(manifest, config)[0]
    if config.shapes == "test":
        shapes = timed_shapes(manifest, config)
    else:
        discrete = [k for k, v in _dim_values(manifest).items() if _is_discrete(v)]
        by_size = sorted((s.dims for s in manifest.shapes), key=lambda d: largest_numel(manifest, d))
        shapes, seen = [], set()
        for dims in by_size:
            key = tuple(dims.get(k) for k in discrete)
            if key not in seen and len(shapes) < 4:
                seen.add(key)
                shapes.append(dims)
        shapes = shapes or timed_shapes(manifest, config)[:1]
    rng = random.Random(seed)
    return [CaseSpec(dims=dict(d), dtype=dtype, distribution="normal", seed=rng.getrandbits(48), tags=["quick"])
            for d in shapes]


def sweep_variants(op_dir: Path, manifest: Manifest, configs: list[Config], sources: list[Path],
                   config: EvalConfig, device: str, seed: int,
                   progress: Callable[[str], None] | None = None,
                   refusals_per_shape: bool = False) -> tuple[list[SweepConfig], str, int]:
    """Each source screened, then all that pass checked and timed in one judge; (per-config results, device
    name, quick cases). A variant's failure never stops the sweep; the judge dying fails every config.

    ``progress`` gets a line per config as it is decided. An untimed sweep (the CPU interpreter) then checks
    each config in its own judge, so that a slow interpreter run is never silent; a timed one keeps all
    configs in one worker (its timing must not be split) and gets one line before it starts.
    ``refusals_per_shape``: a config the GPU refuses to launch at some shapes competes at the others
    (``CheckJob.refusals_per_shape``; only for the original's own configs)."""
    say = progress or (lambda line: None)
    n = len(configs)
    results = [SweepConfig(config=c, ok=False) for c in configs]
    live: list[int] = []
    for i, src in enumerate(sources):
        screened = screen_report(src, op_dir, manifest) if config.screen else None
        if screened is not None:
            results[i].failure = failure = "build failed: " + screened.log.strip().splitlines()[-1][:300]
            say(f"config {i + 1}/{n} {configs[i]}: dropped: {failure[:160]}")
        else:
            live.append(i)
    cases = quick_cases(manifest, config, seed)
    if not live:
        return results, "", len(cases)
    timed = timed_sweep(config, device)
    warmup, rep = config.timing_protocol()
    job = CheckJob(op_dir=str(op_dir), manifest=manifest, candidate=str(sources[live[0]]), device=device,  # type: ignore[arg-type]
                   config=config.model_copy(update={"simulate_timing": config.simulate_timing and device == "cpu",
                                                    "stateful_checks": 0}),
                   warmup=min(warmup, SWEEP_WARMUP), rep=min(rep, SWEEP_REP), timing_seed=seed ^ 0x5EED, cases=cases,
                   timed_shapes=timed_shapes(manifest, config), timing_dtypes=timing_dtypes(manifest, config),
                   ceiling=known_ceiling(device, config.copy_ceiling_gbps), variants=[str(sources[i]) for i in live],
                   refusals_per_shape=refusals_per_shape)
    batches = [[i] for i in live] if progress is not None and not timed else [live]
    if timed:
        say(f"checking and timing {len(live)} config(s) in one worker on {len(job.timed_shapes)} shape(s)")
    dev = ""
    for batch in batches:
        t0 = time.monotonic()
        outcome = run_checker(job.model_copy(update={"candidate": str(sources[batch[0]]),
                                                     "variants": [str(sources[i]) for i in batch]}),
                              timeout_s=config.timeout_s + 60.0, max_wall_s=config.max_wall_s)
        r = outcome.result
        if r is None or r.sweep is None:
            why = (f"sweep {outcome.died}: {outcome.detail}" if outcome.died else
                   f"sweep checker error: {outcome.error.error[:500]}" if outcome.error else "sweep gave no result")
            for i in batch:
                results[i].failure = why
        else:
            dev = r.device
            remember_ceiling(device, r.ceiling)
            for o in r.sweep:
                _fill(results[batch[o.index]], o)
        for i in batch:
            verdict = "passed the checks" if results[i].ok else f"dropped: {(results[i].failure or '')[:160]}"
            say(f"config {i + 1}/{n} {configs[i]}: {verdict} ({time.monotonic() - t0:.0f} s)")
    return results, dev, len(cases)


def _fill(res: SweepConfig, o: VariantOutcome) -> None:
    res.refused = [f"{f.dims} {f.dtype}: {f.detail.strip().splitlines()[-1][:200] if f.detail.strip() else f.reason}"
                   for f in o.refused]
    if o.failure is not None:
        f = o.failure
        where = f" at {f.dims} {f.dtype}" if f.dims else ""
        res.failure = f"{f.reason}{where}: {f.detail}"[:600]
        return
    res.ok = True
    res.shapes = [SweepShape(dims=t.row.dims, dtype=t.row.dtype, original_us=t.row.original_us,
                             candidate_us=t.row.candidate_us or 0.0, speedup=t.row.speedup or 0.0,
                             spread_pct=t.row.spread_pct) for t in o.timing if t.row.candidate_us]


def _geo(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def _buckets(c: SweepConfig) -> dict[str, tuple[dict[str, int], float, float, float, float]]:
    """key -> (dims, original us, candidate us, speedup, spread), geometric means over the timed dtypes."""
    grouped: dict[str, list[SweepShape]] = {}
    for s in c.shapes:
        grouped.setdefault(repr(sorted(s.dims.items())), []).append(s)
    return {k: (v[0].dims, _geo([s.original_us for s in v]), _geo([s.candidate_us for s in v]),
                _geo([s.speedup for s in v]), max(s.spread_pct for s in v)) for k, v in grouped.items()}


def choose(configs: list[SweepConfig], min_change_pct: float,
           collapse: bool = True) -> tuple[list[SweepChoice], bool, int | None]:
    """Per shape bucket the fastest correct config (by speedup over the original timed beside it); one config
    for all when one is within noise (max(spread, min_change_pct)) of the best on every bucket. Returns
    (choices, single, index of the single config or None); ``collapse`` False: always the per-bucket best.
    Untimed (CPU): the first correct config."""
    ok = [i for i, c in enumerate(configs) if c.ok]
    if not ok:
        return [], True, None
    timed = {i: _buckets(configs[i]) for i in ok if configs[i].shapes}
    if not timed:
        return [], True, ok[0]
    if collapse:
        keys = list(next(iter(timed.values())))
        timed = {i: b for i, b in timed.items() if set(b) == set(keys)}  # a config missing a shape cannot serve it
    else:  # per shape among the configs timed there (a sweep of the original: some launch only at some shapes)
        keys = list(dict.fromkeys(k for b in timed.values() for k in b))
    best = {k: max((i for i in timed if k in timed[i]), key=lambda i: timed[i][k][3]) for k in keys}

    def close(i: int, k: str) -> bool:
        b = timed[best[k]][k]
        tol = max(b[4], timed[i][k][4], min_change_pct) / 100.0
        return timed[i][k][3] >= b[3] / (1.0 + tol)

    everywhere = [i for i in timed if all(close(i, k) for k in keys)] if collapse else []
    single = max(everywhere, key=lambda i: _geo([timed[i][k][3] for k in keys])) if everywhere else None
    pick = {k: single if single is not None else best[k] for k in keys}
    choices = [SweepChoice(dims=timed[pick[k]][k][0], config=configs[pick[k]].config, original_us=timed[pick[k]][k][1],
                           candidate_us=timed[pick[k]][k][2], speedup=timed[pick[k]][k][3]) for k in keys]
    return choices, single is not None, single


def _write_frozen(candidate: Path, text: str) -> Path:
    """Next to the candidate (``x.py`` -> ``x.tuned.py``: saved with it in a run folder or a queue item), else
    in a temporary folder when that one is read-only."""
    target = candidate.with_name(f"{candidate.stem}.tuned{candidate.suffix}")
    try:
        write_atomic(target, text)
        return target
    except OSError:
        target = Path(tempfile.mkdtemp(prefix="astra-tuned-")) / target.name
        write_atomic(target, text)
        return target


class KeptSweep(Model):
    """A finished sweep saved beside its candidate (``x.py`` -> ``x.sweep.json``), so an evaluation pass cut short
    after the sweep (a K-candidate decode_attention round spends ~4 GPU-minutes per candidate sweeping on the
    H200, 2026-12-04) does not sweep again: reused only for the same candidate text, op and sweep settings."""

    candidate_sha256: str
    key: str
    report: SweepReport


def sweep_key(manifest: Manifest, config: EvalConfig, device: str) -> str:
    """What a sweep's result depends on besides the candidate text (not its seed: any fresh quick cases do)."""
    # the contract's digest covers the op, SGLang's version, the dims and inputs.py (by its sha): any change sweeps again
    fields = {"contract": manifest_digest(manifest), "device": device, "shapes": config.shapes,
              "timing_dtypes": config.timing_dtypes, "mode": config.mode, "max_configs": config.max_tune_configs,
              "max_timed_shapes": config.max_timed_shapes, "screen": config.screen, "timing": config.timing,
              "min_change_pct": config.min_change_pct, "dtypes": config.dtypes, "gpu": config.gpu}
    return sha256_text(repr(sorted(fields.items())))


def _kept_path(candidate: Path) -> Path:
    return candidate.with_name(f"{candidate.stem}.sweep.json")


def kept_sweep(candidate: Path, text: str, key: str) -> SweepReport | None:
    """The saved sweep of exactly this candidate text and key, its frozen source rewritten if it went missing;
    None when there is none, it is for other text or settings, or it is unreadable."""
    try:
        kept = KeptSweep.model_validate_json(_kept_path(candidate).read_text())
    except (OSError, ValueError):
        return None
    r = kept.report
    if kept.candidate_sha256 != sha256_text(text) or kept.key != key:
        return None
    if r.frozen_source is not None:
        if sha256_text(r.frozen_source) != r.frozen_sha256:
            return None
        path = Path(r.frozen_path or "")
        try:
            current = path.read_text() if path.is_file() else None
        except OSError:
            current = None
        if current != r.frozen_source:
            path = _write_frozen(candidate, r.frozen_source)
        r = r.model_copy(update={"frozen_path": str(path)})
    return r


def _keep_sweep(candidate: Path, text: str, key: str, report: SweepReport) -> None:
    try:
        write_atomic(_kept_path(candidate), KeptSweep(candidate_sha256=sha256_text(text), key=key, report=report)
                     .model_dump_json(indent=1) + "\n")
    except OSError:
        pass  # a read-only folder: the sweep is only not reusable


def tune_candidate(op_dir: Path, manifest: Manifest, candidate: Path, space: TuneSpace, config: EvalConfig,
                   device: str, seed: int) -> SweepReport:
    """The sweep of one tunable candidate; ``frozen_path`` is None when no config survived. A timed sweep is saved
    beside the candidate and reused by the next evaluation of the same text under the same settings."""
    t0 = time.monotonic()
    text = candidate.read_text()
    key = sweep_key(manifest, config, device)
    reused = kept_sweep(candidate, text, key)
    if reused is not None:
        return reused
    configs = space.configs()
    skipped: list[SweepConfig] = []
    if not timed_sweep(config, device) and len(configs) > UNTIMED_SWEEP_CONFIGS:
        keep = untimed_sample(len(configs), UNTIMED_SWEEP_CONFIGS)
        why = (f"not checked here: an untimed sweep quick-checks {len(keep)} of the {len(configs)} configs (the first, "
               "the last, evenly between); the GPU sweep checks every config before timing it")
        skipped = [SweepConfig(config=c, ok=False, failure=why) for i, c in enumerate(configs) if i not in keep]
        configs = [configs[i] for i in keep]
    with tempfile.TemporaryDirectory(prefix="astra-sweep-") as tmp:
        sources = []
        for i, c in enumerate(configs):
            path = Path(tmp) / f"{candidate.stem}_v{i:02d}.py"
            path.write_text(variant_source(text, space, c, f"config {i + 1}/{len(configs)} {c}"))
            sources.append(path)
        results, dev, n_quick = sweep_variants(op_dir, manifest, configs, sources, config, device, seed)
    choices, single, index = choose(results, config.min_change_pct)
    untimed = not any(r.shapes for r in results)
    report = SweepReport(parameters=space.params, configs=results + skipped, choice=choices, single=single,
                         quick_cases=n_quick, method=sweep_method(config, dev, untimed),
                         note=CPU_NOTE if device != "cuda" else "")
    if index is not None or choices:
        table = ([({}, results[index].config)] if untimed and index is not None else
                 [(choices[0].dims, choices[0].config)] if single else [(c.dims, c.config) for c in choices])
        frozen = freeze(text, space, table, manifest)
        path = _write_frozen(candidate, frozen)
        report.frozen_path, report.frozen_sha256, report.frozen_source = str(path), sha256_text(frozen), frozen
    report.wall_s = time.monotonic() - t0
    if not untimed and report.frozen_path is not None:  # a failed sweep may be the device's fault: sweep again;
        _keep_sweep(candidate, text, key, report)  # an interpreter sweep is quick and chooses arbitrarily
    return report


def timed_sweep(config: EvalConfig, device: str) -> bool:
    """Whether a sweep can time its configs here (a GPU, or the CPU's simulated timing), or only check them."""
    return config.timing and (device == "cuda" or config.simulate_timing)


def untimed_sample(n: int, k: int) -> list[int]:
    """Indices of ``k`` of ``n`` configs, first and last included, evenly spaced between (distinct, sorted)."""
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def sweep_method(config: EvalConfig, device: str, untimed: bool) -> str:
    if untimed:
        return "quick check only (no timing on this device)"
    warmup, rep = config.timing_protocol()
    return (f"{device}: each config in one worker, ABBA against the original in batches (as the full evaluation), "
            f"{min(warmup, SWEEP_WARMUP)} warm-up / {min(rep, SWEEP_REP)} timed per side, {config.mode} L2, no "
            "wall-clock cross-check (the frozen source's full evaluation has it)")


def declared_space(candidate: Path, max_configs: int = MAX_CONFIGS) -> TuneSpace | None:
    """The candidate's TUNE space (TuneError if malformed or over ``max_configs``); None if it declares none."""
    try:
        return find_space(candidate.read_text(), max_configs)
    except (OSError, UnicodeDecodeError):
        return None
