"""``sweep_baseline``: the original's own launch parameters swept, the per-shape best as the bar to beat.

A candidate that wins only what retuning SGLang's own launch would win has found no better kernel. Each
variant is the original source with its launch values changed (``launch_params.py``); the variants go through
the same sweep as a tunable candidate's (``sweep.sweep_variants``: screen, quick check, one worker timing them
ABBA against the unchanged original in the trusted judge), and per shape the fastest correct variant is the
sweep baseline. Nothing is frozen or shipped here: it is a measurement.
"""

from __future__ import annotations

import itertools
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from astra_sglang.contract.eval_config import EvalConfig
from astra_sglang.contract.op import Manifest, ManifestError, TritonRecipe, load_manifest
from astra_sglang.contract.result import BaselineShape, SweepBaseline, TuneValue
from astra_sglang.errors import AstraError
from astra_sglang.harness.launch_params import LaunchParam, find_launch_params, launch_variant
from astra_sglang.harness.sweep import CPU_NOTE, choose, sweep_method, sweep_variants

BASELINE_NAME = "tune_baseline.json"
CHECK_ONLY_NOTE = ("correctness only (Triton CPU interpreter): every config checked on the test shapes, none "
                   "timed; which is fastest needs a GPU")


def original_params(op_dir: Path, manifest: Manifest) -> list[LaunchParam]:
    """The sweepable launch parameters of the op's original (one-line AstraError/TuneError when none)."""
    r = manifest.recipe
    if not isinstance(r, TritonRecipe):
        raise AstraError(f"{manifest.short_name} is a {r.kind} op: its source exposes no launch or template "
                         "parameters to sweep (the launch configuration is computed in its C++ code)")
    text = (Path(op_dir) / r.source).read_text()
    return find_launch_params(text, list(r.tuned or r.kernels))


def sweep_baseline(op_dir: Path, config: EvalConfig,
                   progress: Callable[[str], None] | None = None) -> SweepBaseline:
    """The sweep; with ``config.timing`` off (the CPU interpreter) only the checks of every config run, and
    the result has no shapes: it says which configs are correct, never which is faster."""
    from astra_sglang.harness.evaluate import resolve_device

    t0 = time.monotonic()
    op_dir = Path(op_dir).resolve()
    try:
        manifest = load_manifest(op_dir)
    except ManifestError as e:
        raise AstraError(str(e)) from None
    params = original_params(op_dir, manifest)
    device = resolve_device(config)
    r = manifest.recipe
    assert isinstance(r, TritonRecipe)
    text = (op_dir / r.source).read_text()
    configs: list[dict[str, TuneValue]] = [dict(zip((p.name for p in params), values))
                                           for values in itertools.product(*(p.values for p in params))]
    seed = config.seed if config.seed is not None else random.SystemRandom().getrandbits(48)
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
        results, dev, _ = sweep_variants(op_dir, manifest, configs, sources, trusted, device, seed, progress)
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
                         wall_s=time.monotonic() - t0)


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
