"""``patches add-retune``: SGLang's own kernel under the launch configs its sweep baseline found, as a patch.

The sweep (``astra-sglang tune``, or a run's round-0 ``r000-tune``) times every launch config of SGLang's kernel at
every timed shape. A call can be matched on the dims it shows (``call_dims``: batch, heads, head dim), not on those
held in index data (decode attention's context lengths), so shapes that look alike to a call form one bucket, and a
bucket gets the one config with the best geomean over its shapes, not each shape's own best. The guard is derived,
as for every patch, from where that config beat SGLang's default beyond the spread; the patch is then a normal
patch: pinned, version and arch gated, checked against the original at its first call.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from astra_sglang.contract.base import write_atomic
from astra_sglang.contract.op import canonical_op_id, entry_and_call, load_manifest, manifest_digest, unstated_dims
from astra_sglang.contract.patch import (
    Evidence,
    GuardRow,
    PatchManifest,
    PatchSource,
    Provenance,
    RetuneRecipe,
    RetuneRow,
    ValidatedOn,
    pin_files,
    served_targets,
    write_patch_manifest,
)
from astra_sglang.contract.restore import materialize
from astra_sglang.contract.result import SweepBaseline, SweepConfig, SweepShape
from astra_sglang.data_paths import user_cache
from astra_sglang.errors import AstraError
from astra_sglang.patches.registry import op_folder
from astra_sglang.patches.retune import RECIPE_NAME, retuned_text
from astra_sglang.patches.tooling.add import (
    _check_id,
    _import_triton,
    covered_check_shapes,
    fresh_patch_dir,
    guard_default,
)
from astra_sglang.patches.tooling.guard import derive_guard
from astra_sglang.platform_info import arch_of_text, gpu_of_text


def read_sweep_file(path: Path) -> SweepBaseline:
    """A sweep baseline from ``tune_baseline.json``, a queue's tune answer (``baseline.json``) or a run's round-0
    ``tune.json`` (both a TuneOutcome holding one)."""
    import json

    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise AstraError(f"{path}: unreadable ({type(e).__name__})") from None
    body = raw.get("baseline") if isinstance(raw, dict) and "baseline" in raw and "op_id" not in raw else raw
    if body is None:
        raise AstraError(f"{path}: the sweep has no baseline ({raw.get('error') or 'not answered'})")
    try:
        return SweepBaseline.model_validate(body)
    except ValueError as e:
        raise AstraError(f"{path}: not a sweep baseline ({str(e).splitlines()[0][:200]})") from None


def _at(c: SweepConfig, dims: dict[str, int], dtype: str) -> SweepShape | None:
    return next((s for s in c.shapes if s.dims == dims and s.dtype in dtype.split("/")), None)


def bucket_rows(sweep: SweepBaseline, readable: set[str], min_gain_pct: float) -> tuple[list[RetuneRow], list[GuardRow]]:
    """One row per bucket of shapes a call cannot tell apart, with the config of the best geomean over them; and
    every timed shape as a guard row (that config against SGLang's default there)."""
    buckets: dict[tuple[tuple[str, int], ...], list[tuple[dict[str, int], str]]] = {}
    for s in sweep.shapes:
        key = tuple(sorted((k, v) for k, v in s.dims.items() if k in readable))
        buckets.setdefault(key, []).append((s.dims, s.dtype))
    # a config the GPU refused at some shape of the sweep never serves: inside the patch's guard a call between its
    # buckets could be such a shape, and a launch error at call time disables the whole patch
    ok = [c for c in sweep.configs if c.ok and c.shapes and not c.refused]
    rows: list[RetuneRow] = []
    guard: list[GuardRow] = []
    for key, shapes in buckets.items():
        best: tuple[float, SweepConfig, list[SweepShape]] | None = None
        for c in ok:
            got = [_at(c, d, t) for d, t in shapes]
            timed = [g for g in got if g is not None]
            if len(timed) < len(shapes) or not all(g.speedup > 0 for g in timed):
                continue
            geo = math.exp(sum(math.log(g.speedup) for g in timed) / len(timed))
            if best is None or geo > best[0]:
                best = (geo, c, timed)
        if best is None:
            continue
        geo, c, timed = best
        if any(not isinstance(v, int) for v in c.config.values()):
            raise AstraError(f"sweep config {c.config}: a retune sets integer launch values only")
        rows.append(RetuneRow(dims=dict(key), config={k: int(v) for k, v in c.config.items()},
                              shapes=[d for d, _ in shapes], geomean_speedup=geo))
        for (d, dtype), g in zip(shapes, timed, strict=True):
            guard.append(GuardRow(dims=dict(d), dtype=dtype, served_us=g.original_us, candidate_us=g.candidate_us,
                                  speedup=g.speedup, spread_pct=g.spread_pct,
                                  wins=(g.speedup - 1.0) * 100.0 > max(g.spread_pct, min_gain_pct)))
    if not rows:
        raise AstraError("no config of the sweep was timed on every shape of a bucket: nothing to retune")
    return rows, guard


def add_retune(op: str, sweep_path: Path, *, patch_id: str, root: Path | None = None, force: bool = False,
               min_gain_pct: float = 2.0, description: str = "", in_all: bool = True) -> Path:
    """Register SGLang's ``op`` under its sweep's launch configs as ``patches/<op>/<patch_id>/`` (retune.json and
    the manifest). Refused when the sweep is of another op, SGLang version or contract, or wins nowhere.
    ``in_all`` False: served only where its id is named, never by ``ASTRA_SGLANG_PATCHES=all`` (a retune not yet
    measured end to end behind the op's rewrite, which it stacks behind once both are named)."""
    from astra_sglang.harness.parent.tune_space import call_dims
    from astra_sglang.patches.adapters import get_adapter

    _check_id(patch_id)
    sweep = read_sweep_file(sweep_path)
    folder = op_folder(op)
    op_manifest = load_manifest(folder)
    if canonical_op_id(sweep.op_id) != canonical_op_id(op_manifest.op_id):
        raise AstraError(f"{sweep_path} is a sweep of {sweep.op_id}, not of {op_manifest.op_id}")
    if sweep.sglang_version != op_manifest.sglang_version:
        raise AstraError(f"{sweep_path} swept SGLang {sweep.sglang_version}; the {op} contract is "
                         f"{op_manifest.sglang_version}")
    if sweep.device.startswith("cpu"):
        raise AstraError(f"{sweep_path} was not timed on a GPU ({sweep.device}): it says nothing about speed")
    entry, _ = entry_and_call(op_manifest, "triton")
    rows, guard_rows = bucket_rows(sweep, call_dims(op_manifest), min_gain_pct)
    contract_dims = {k for s in op_manifest.shapes for k in s.dims}
    if any(set(d) - contract_dims for r in rows for d in r.shapes):
        raise AstraError(f"{sweep_path}: its shapes have dims the {op} contract does not (an older contract); "
                         "sweep it again")
    # a guard from shapes SGLang no longer serves as the contract states them (decode attention's S 1024 -> 1033
    # and q in the qkv rows) would serve calls no measurement covered
    stale = unstated_dims(op_manifest, [s.dims for s in sweep.shapes])
    if stale:
        raise AstraError(f"{sweep_path}: {len(stale)} of its {len(sweep.shapes)} shapes are not the {op} contract's "
                         f"(first: {stale[0]}; a contract revision since?): sweep it again, `tune {op} --prior "
                         f"{sweep_path}` re-times only its best configs")
    recipe = RetuneRecipe(op_id=op_manifest.op_id, sglang_version=sweep.sglang_version, swept_on=sweep.device,
                          parameters={k: [int(v) for v in vs] for k, vs in sweep.parameters.items()}, rows=rows)
    full = materialize(folder, user_cache())
    text = retuned_text(full, op_manifest, recipe)  # refuses a recipe SGLang's launch no longer matches
    ad = get_adapter(op)
    guard, marked = derive_guard(guard_default(ad, op_manifest), guard_rows, ad.unseen_sizes)
    # this process's own file: two `add-retune`s of one id (parallel tests, two shells) shared one name, and the
    # first to finish deleted the file the other was importing ("add-rt-merge.py does not exist", 2026-12-07)
    probe = user_cache() / "retuned" / f"add-{patch_id}-{os.getpid()}.py"
    probe.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(probe, text)
    try:  # before the folder exists: a retune that cannot import leaves nothing half-registered
        _import_triton(probe, entry, full)
    finally:
        probe.unlink(missing_ok=True)
    dest = fresh_patch_dir(root, op, patch_id, force)
    write_atomic(dest / RECIPE_NAME, recipe.model_dump_json(indent=1) + "\n")
    arch = arch_of_text(sweep.device)
    gpu = gpu_of_text(sweep.device)
    m = PatchManifest(
        patch_id=patch_id, op=op, op_manifest_sha256=manifest_digest(op_manifest),
        description=description or (f"SGLang's own {op} kernel with the launch configs its sweep found on "
                                    f"{gpu or sweep.device}, {len(rows)} bucket(s) by {', '.join(sorted(rows[0].dims))}"),
        source=PatchSource(kind="triton", file=RECIPE_NAME, retune=True),
        targets=served_targets(op_manifest),
        validated_on=ValidatedOn(sglang_versions=[sweep.sglang_version], archs=[arch] if arch else [],
                                 gpus=[gpu] if gpu else []),
        guard=guard, check_shapes=covered_check_shapes(ad.default_check_shapes(), guard),
        files=pin_files(dest),
        provenance=Provenance(kind="hand-written", author="astra-sglang patches add-retune",
                              note=f"no kernel code: SGLang's own, launch configs from the sweep {sweep_path} "
                                   f"({sweep.method[:200]})"),
        evidence=Evidence(baseline="SGLang's kernel under its own launch configs (what the triton backend runs)",
                          notes=[f"sweep baseline on {sweep.device}: {len(sweep.configs)} configs x "
                                 f"{len(sweep.shapes)} shapes; per bucket the config of the best geomean"
                                 + (f" ({sweep.configs_from})" if sweep.configs_from else ""),
                                 "patches add: made from the installed SGLang's source and imported under "
                                 "TRITON_INTERPRET=1"],
                          guard_table=marked),
        in_all=in_all,
    )
    write_patch_manifest(dest, m)
    return dest
