"""``sweep_baseline``: the original's own launch parameters swept, the per-shape best as the bar to beat.

A candidate that wins only what retuning SGLang's own launch would win has found no better kernel. Each
variant is the original source with its launch values changed (``launch_params.py``); the variants go through
the same sweep as a tunable candidate's (``sweep.sweep_variants``: screen, quick check, one worker timing them
ABBA against the unchanged original in the trusted judge), and per shape the fastest correct variant is the
sweep baseline. Nothing is frozen or shipped here: it is a measurement.

The configs go to the judge in chunks, each chunk timed against the original in its own worker (every ratio is
still side by side), and what is decided is kept in ``<out>.partial.json`` after each chunk: decode_attention's
64 configs x 14 paper shapes outlast one 600 s device call, and two calls cut it with nothing kept (2026-12-04).
The next ``tune`` of the same sweep (same source, parameters, shapes, dtypes, L2 mode) resumes from it.
"""

from __future__ import annotations

import itertools
import random
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import Field

from astra_sglang.contract.base import Model, write_atomic
from astra_sglang.contract.eval_config import EvalConfig
from astra_sglang.contract.op import Manifest, ManifestError, TritonRecipe, load_manifest
from astra_sglang.contract.result import BaselineShape, SweepBaseline, SweepConfig, TuneValue
from astra_sglang.errors import AstraError
from astra_sglang.harness.parent.launch_params import (
    LaunchParam,
    config_dict_params,
    find_launch_params,
    launch_variant,
)
from astra_sglang.harness.parent.sweep import CPU_NOTE, choose, sweep_method, sweep_variants
from astra_sglang.harness.shared.suite import timed_shapes

BASELINE_NAME = "tune_baseline.json"
PRIOR_NAME = "tune_baseline.prior.json"  # tune --prior: part of the space, for retunes; never read as a bar
# Configs per worker: a worker's start and warm-up cost ~7 s, and each config of decode_attention's 64 takes ~14 s
# over 14 timed shapes (H100). Chunks of 16 took ~230 s each: a pass cut by its call's limit in config 16 of the
# first chunk kept nothing (2026-12-05). Four configs lose at most ~1 minute to a cut.
CHUNK = 4
CHECK_ONLY_NOTE = ("correctness only (Triton CPU interpreter): every config checked on the test shapes, none "
                   "timed; which is fastest needs a GPU")


def original_params(op_dir: Path, manifest: Manifest) -> list[LaunchParam]:
    """The sweepable launch parameters of the op's original (one-line AstraError/TuneError when none)."""
    r = manifest.recipe
    if not isinstance(r, TritonRecipe):
        raise AstraError(f"{manifest.short_name} is a {r.kind} op: its source exposes no launch or template "
                         "parameters to sweep (the launch configuration is computed in its C++ code)")
    text = (Path(op_dir) / r.source).read_text()
    if r.config_space and r.config_arg:  # the launch config arrives as a dict: its keys, not the launch's literals
        return config_dict_params(text, r.wrapper.split(":")[-1], r.config_arg, r.config_space)
    return find_launch_params(text, list(r.tuned or r.kernels))


class TunePartial(Model):
    """What a cut sweep decided so far; valid only for the sweep ``key`` names."""

    key: str = Field(description="the sweep: source sha256, parameters, shapes, dtypes, L2 mode, device kind")
    seed: int = Field(description="the quick cases' seed, kept so every config is checked on the same cases")
    device: str = ""
    done: dict[int, SweepConfig] = Field(default_factory=dict, description="config index -> its outcome")


def partial_path(out: Path, gpu: str | None = None) -> Path:
    """Where a cut sweep keeps its decided chunks: one file per GPU model, because a sweep is keyed by its GPU and
    queue passes alternate between H100s and H200s; one shared file was dropped as "another sweep" at every switch,
    so decode_attention's 64-config sweep restarted from zero each pass and never finished (2026-12-05)."""
    slug = re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-") if gpu else ""
    return out.with_name(out.stem + (f".{slug}" if slug else "") + ".partial.json")


def _sweep_key(text: str, params: list[LaunchParam], config: EvalConfig, device: str,
               only: list[dict[str, TuneValue]] | None = None) -> str:
    import hashlib

    what = [hashlib.sha256(text.encode()).hexdigest(), [(p.name, p.values) for p in params], config.shapes,
            config.dtypes, config.timing_dtypes, config.mode, config.timing, device, config.gpu,
            "refusals per shape"]  # a partial kept before that policy dropped configs it now times
    if only is not None:
        what.append(sorted(repr(sorted(c.items())) for c in only))
    return hashlib.sha256(repr(what).encode()).hexdigest()[:32]


def _read_partial(path: Path | None, key: str, say: Callable[[str], None],
                  shapes: list[dict[str, int]] | None = None) -> TunePartial | None:
    """The kept chunks of this sweep, or None. ``shapes``: the contract's timed shapes now. The key names the
    shape set ("paper"), not its dims, so a contract revision that moved them (decode attention's S -> S+9 and q in
    qkv rows, 2026-12-06) would have mixed configs timed on the old shapes into the new sweep; the dims each kept
    config was timed on must be today's."""
    if path is None or not path.is_file():
        return None
    try:
        p = TunePartial.model_validate_json(path.read_text())
    except (OSError, ValueError) as e:
        say(f"ignoring {path}: unreadable ({type(e).__name__})")
        return None
    if p.key != key:
        say(f"ignoring {path}: it is another sweep (source, parameters, shapes or mode changed)")
        return None
    if shapes is not None:
        want = {tuple(sorted(d.items())) for d in shapes}
        if any(not {tuple(sorted(s.dims.items())) for s in c.shapes} <= want for c in p.done.values() if c.shapes):
            say(f"ignoring {path}: its configs were timed on other shapes than the contract's now (revised)")
            return None
    return p


def _judge_failed(c: SweepConfig) -> bool:
    """A config failed because its worker died or gave nothing (sweep.sweep_variants' 'sweep ...' reasons): not
    a verdict on the config, so a resumed sweep runs it again."""
    return not c.ok and (c.failure or "").startswith("sweep ")


def _chunk_say(say: Callable[[str], None], n: int, of: int, part: list[int]) -> Callable[[str], None]:
    if of == 1:
        return say

    def chunk_say(line: str) -> None:  # "config 3/16" inside a chunk: name the chunk and the sweep's numbering
        say(f"chunk {n}/{of} (configs {part[0] + 1}-{part[-1] + 1}): {line}")

    return chunk_say


def sweep_baseline(op_dir: Path, config: EvalConfig,
                   progress: Callable[[str], None] | None = None, partial: Path | None = None,
                   chunk: int = CHUNK, prior: tuple[SweepBaseline, int] | None = None) -> SweepBaseline:
    """The sweep; with ``config.timing`` off (the CPU interpreter) only the checks of every config run, and
    the result has no shapes: it says which configs are correct, never which is faster. ``partial``: where
    each finished chunk is kept and a cut sweep of the same key resumes from (removed once the sweep ends).
    ``prior``: (an earlier sweep of this op, K): only the configs among each of its shapes' K fastest
    (``prior_configs``), as after a contract revision that moved the shapes a little."""
    from astra_sglang.harness.parent.evaluate import resolve_device, with_gpu

    t0 = time.monotonic()
    op_dir = Path(op_dir).resolve()
    try:
        manifest = load_manifest(op_dir)
    except ManifestError as e:
        raise AstraError(str(e)) from None
    params = original_params(op_dir, manifest)
    device = resolve_device(config)
    config = with_gpu(config, device)
    r = manifest.recipe
    assert isinstance(r, TritonRecipe)
    text = (op_dir / r.source).read_text()
    configs: list[dict[str, TuneValue]] = [dict(zip((p.name for p in params), values))
                                           for values in itertools.product(*(p.values for p in params))]
    say = progress or (lambda line: None)
    configs_from = ""
    if prior is not None:
        space = len(configs)
        configs = prior_configs(prior[0], configs, prior[1], manifest.short_name)
        configs_from = (f"{len(configs)} of the {space} configs: each timed shape's {prior[1]} fastest in the prior "
                        f"sweep on {prior[0].device} ({len(prior[0].shapes)} shapes, {len(prior[0].configs)} configs)")
        say(f"sweeping {configs_from}")
    key = _sweep_key(text, params, config, device, configs if prior is not None else None)
    kept = _read_partial(partial, key, say, timed_shapes(manifest, config) if config.timing else None)
    seed = kept.seed if kept else config.seed if config.seed is not None else random.SystemRandom().getrandbits(48)
    state = kept or TunePartial(key=key, seed=seed)
    todo = [i for i in range(len(configs)) if i not in state.done]
    if kept:
        say(f"resuming from {partial}: {len(state.done)} of {len(configs)} config(s) already decided")
    with tempfile.TemporaryDirectory(prefix="astra-tune-") as tmp:
        sources = []
        for i, c in enumerate(configs):
            path = Path(tmp) / f"{Path(r.source).stem}_v{i:02d}.py"
            path.write_text(launch_variant(text, params, c))
            sources.append(path)
        # The variants are SGLang's own source with launch values changed by this code: nothing of them is a
        # candidate's. The candidate screen refuses SGLang's own imports (decode_attention.py imports logging
        # and sglang.srt.utils), which dropped all 64 configs of decode_attention on the H200 (2026-12-04).
        trusted = config.model_copy(update={"screen": False})
        step = max(1, chunk)
        chunks = [todo[k:k + step] for k in range(0, len(todo), step)]
        for n, part in enumerate(chunks, 1):
            got, dev, _ = sweep_variants(op_dir, manifest, [configs[i] for i in part], [sources[i] for i in part],
                                         trusted, device, seed, _chunk_say(say, n, len(chunks), part),
                                         refusals_per_shape=True)
            if dev and state.device and dev != state.device:  # one baseline, one GPU: never a mix of two
                raise AstraError(f"tune {manifest.short_name}: the configs kept in {partial} were measured on "
                                 f"{state.device}, this run is on {dev}; remove that file to sweep here from the start")
            decided = {i: c for i, c in zip(part, got, strict=True) if not _judge_failed(c)}
            state.done.update(decided)
            state.device = dev or state.device
            if partial is not None and decided:
                write_atomic(partial, state.model_dump_json() + "\n")
            if len(decided) < len(part):  # the judge itself failed: no verdict on those configs, none made up
                why = next(c.failure or "" for c in got if _judge_failed(c))
                kept_note = (f"; {len(state.done)} of {len(configs)} config(s) decided so far are kept in {partial} "
                             "and the next `tune` resumes there" if partial is not None and state.done else "")
                raise AstraError(f"tune {manifest.short_name}: the judge failed on configs {part[0] + 1}-{part[-1] + 1} "
                                 f"of {len(configs)} ({why[:300]}){kept_note}")
    results = [state.done[i] for i in range(len(configs))]
    dev = state.device
    if not any(c.ok for c in results):
        first = next((c.failure for c in results if c.failure), "")
        raise AstraError(f"tune {manifest.short_name}: no config of the original passed its checks (first: "
                         f"{(first or '')[:300]})")
    # per shape the best (never collapsed to one config: the baseline is the best a retuned launch reaches)
    choices, _, _ = choose(results, 0.0, collapse=False)
    shapes = [BaselineShape(dims=c.dims, dtype="/".join(sorted({s.dtype for x in results for s in x.shapes})),
                            original_us=c.original_us, best_config=c.config, best_us=c.candidate_us,
                            speedup=c.speedup) for c in choices]
    return SweepBaseline(op_id=manifest.op_id, sglang_version=manifest.sglang_version,
                         device=dev or ("cuda" if device == "cuda" else "cpu (TRITON_INTERPRET=1)"),
                         parameters={p.name: p.values for p in params},
                         original_config={p.name: p.original for p in params}, shapes=shapes, configs=results,
                         method=sweep_method(config, dev, not shapes),
                         note="" if device == "cuda" else CPU_NOTE if shapes else CHECK_ONLY_NOTE,
                         wall_s=time.monotonic() - t0, configs_from=configs_from)


def prior_configs(prior: SweepBaseline, space: list[dict[str, TuneValue]], k: int,
                  op: str) -> list[dict[str, TuneValue]]:
    """The configs of ``space`` that were among the ``k`` fastest correct ones at some shape of ``prior``, in the
    space's order. A re-sweep after a small contract revision (decode attention: S 1024 -> 1033, q in the qkv rows)
    then times 9 of 64 configs (the H100 sweep's top 3 per shape), about 70 s instead of 500 s of a GPU session.
    The whole space stays the bar a loop run must beat; this is for retunes, which need good configs, not all."""
    if not prior.configs:
        raise AstraError(f"tune {op} --prior: that sweep lists no configs (a CPU check-only sweep?)")
    names = set(space[0]) if space else set()
    if {frozenset(c.config) for c in prior.configs} != {frozenset(names)}:
        raise AstraError(f"tune {op} --prior: that sweep varied {sorted(prior.parameters)}, this source exposes "
                         f"{sorted(names)}: not the same space")
    ok = [c for c in prior.configs if c.ok and c.shapes]
    keep: set[str] = set()
    at: dict[str, list[tuple[float, SweepConfig]]] = {}  # per timed shape: the configs timed there
    for c in ok:
        for s in c.shapes:
            at.setdefault(repr((sorted(s.dims.items()), s.dtype)), []).append((s.candidate_us, c))
    for timed in at.values():
        keep.update(repr(sorted(c.config.items())) for _, c in sorted(timed, key=lambda t: t[0])[:k])
    chosen = [c for c in space if repr(sorted(c.items())) in keep]
    if not chosen:
        raise AstraError(f"tune {op} --prior: none of that sweep's fastest configs is in this source's space")
    return chosen


def measured_on_gpu(b: SweepBaseline) -> bool:
    """Whether ``b``'s times are GPU measurements: a CPU sweep ('cpu (TRITON_INTERPRET=1)', 'cpu (simulated
    timing, ...)') times host calls of the interpreter, which say nothing about a kernel's speed."""
    return not b.device.startswith("cpu")


def read_baseline(op_dir: Path) -> SweepBaseline | None:
    """The op folder's ``tune_baseline.json``, None when absent, unreadable or not measured on a GPU (older
    versions wrote one from CPU interpreter timings): then it is reported missing, never used as a bar."""
    path = Path(op_dir) / BASELINE_NAME
    try:
        b = SweepBaseline.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None
    return b if measured_on_gpu(b) else None
