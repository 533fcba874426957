"""``patches add`` / ``add-run``: copy a measured kernel into ``patches/<op>/<patch-id>/`` with its manifest."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from astra_sglang.contract.base import fit_dim, sha256_file
from astra_sglang.contract.op import (
    Manifest,
    entry_and_call,
    load_manifest,
    manifest_digest,
)
from astra_sglang.contract.patch import (
    DimRange,
    Evidence,
    GuardRow,
    GuardSpec,
    PatchManifest,
    PatchSource,
    Provenance,
    ValidatedOn,
    pin_files,
    served_targets,
    target_problem,
    write_patch_manifest,
)
from astra_sglang.contract.restore import materialize
from astra_sglang.data_paths import user_cache
from astra_sglang.errors import AstraError
from astra_sglang.patches.registry import op_folder, patches_root
from astra_sglang.patches.tooling.guard import (
    derive_guard,
    describe,
    measured_rows,
    rows_behind,
    within_contract,
    within_shapes,
)
from astra_sglang.platform_info import arch_of_text, gpu_of_text

if TYPE_CHECKING:
    from astra_sglang.contract.result import EvalResult
    from astra_sglang.patches.adapters import OpAdapter

IMPORT_TIMEOUT_S = 300
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _check_id(patch_id: str) -> None:
    if not _ID.match(patch_id):
        raise AstraError(f"patch id {patch_id!r}: use letters, digits, '_', '-', '.'")


def add_patch(
    op: str,
    source: Path,
    *,
    patch_id: str,
    provenance: Provenance,
    evidence: Evidence | None = None,
    kind: str | None = None,
    targets: list[str] | None = None,
    guard: GuardSpec | None = None,
    sglang_versions: list[str] | None = None,
    archs: list[str] | None = None,
    extra_files: list[Path] | None = None,
    description: str = "",
    root: Path | None = None,
    force: bool = False,
) -> Path:
    """Copy a kernel source into ``patches/<op>/<patch_id>/`` and write its manifest.

    How the kernel is called, and the tolerances it is checked with, come from the extracted op's manifest
    (pinned by its SHA-256); ``targets`` default to where SGLang serves the op (``served_targets``), and must be among
    the op's call sites; guard and check shapes default to the op adapter's. ``validated_on`` defaults to the
    SGLang version the evidence was measured with and the arch of its device, and may not be empty (a patch
    validated nowhere is one nobody can use). The source is screened and built first (``check_source``).
    """
    from astra_sglang.patches.adapters import get_adapter

    _check_id(patch_id)
    source = Path(source)
    if not source.is_file():
        raise AstraError(f"kernel source {source} {'is a directory, not a file' if source.is_dir() else 'does not exist'}")
    ad = get_adapter(op)
    kind = kind or ("triton" if source.suffix == ".py" else "cuda_jit")
    if kind not in ("triton", "cuda_jit"):
        raise AstraError(f"kernel kind {kind!r}: expected triton or cuda_jit")
    folder = op_folder(op)
    op_manifest = load_manifest(folder)
    entry_and_call(op_manifest, kind)  # refuses a CUDA kernel for a Triton op
    targets = targets or served_targets(op_manifest)
    problem = target_problem(op_manifest, targets)
    if problem:
        raise AstraError(problem)
    evidence = evidence or Evidence()
    if sglang_versions is None:
        sglang_versions = sorted({r.sglang_version for r in evidence.results if r.sglang_version})
    if archs is None:
        archs = sorted({a for r in evidence.results if (a := arch_of_text(r.device))})
    missing = [what for what, got in (("--sglang-version", sglang_versions), ("--arch", archs)) if not got]
    if missing:
        raise AstraError(f"validated_on would be empty: pass {' and '.join(missing)} (e.g. --sglang-version 0.5.23 "
                         "--arch sm_90) or --evidence with a harness result that names them")
    guard = within_contract(guard, op_manifest) if guard is not None else guard_default(ad, op_manifest)
    checked = check_source(op_manifest, folder, source, kind, guard.dtypes)
    evidence = evidence.model_copy(update={"notes": [*evidence.notes, f"patches add: {checked}"]})
    dest = fresh_patch_dir(root, op, patch_id, force)
    kernel_name = "kernel.py" if kind == "triton" else "kernel.cuh"
    shutil.copy2(source, dest / kernel_name)
    for f in extra_files or []:
        shutil.copy2(f, dest / Path(f).name)
    m = PatchManifest(
        patch_id=patch_id,
        op=op,
        op_manifest_sha256=manifest_digest(op_manifest),
        description=description,
        source=PatchSource(kind=kind, file=kernel_name),  # type: ignore[arg-type]
        targets=targets,
        validated_on=ValidatedOn(sglang_versions=sglang_versions, archs=archs, gpus=sorted(
            {g for r in evidence.results if (g := gpu_of_text(r.device))})),
        guard=guard,
        check_shapes=covered_check_shapes(ad.default_check_shapes(), guard),
        files=pin_files(dest),
        provenance=provenance,
        evidence=evidence,
    )
    write_patch_manifest(dest, m)
    return dest


def fresh_patch_dir(root: Path | None, op: str, patch_id: str, force: bool) -> Path:
    """``<root>/<op>/<patch_id>/``, made empty: an existing folder of that id is replaced only with ``force``."""
    dest = (Path(root) if root is not None else patches_root()) / op / patch_id
    if dest.exists():
        if not force:
            raise AstraError(f"{dest} exists; pick another --id or pass --force")
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    return dest


def check_source(op: Manifest, op_dir: Path, source: Path, kind: str, dtypes: list[str]) -> str:
    """Refuse, before anything is written, a source that is not the language of its kind, that the static screen
    rejects, or that does not build: a registered patch that cannot load would only fail in SGLang's servers.
    Returns what was checked. CUDA: compiled and linked (not loaded: no GPU needed) per dtype, where nvcc and
    ninja are here. Triton: imported under TRITON_INTERPRET=1 in a child process, the entry function present."""
    from astra_sglang.harness.parent.screen import cuda_search_dirs, screen_cuda, screen_python

    text = source.read_text(errors="replace")
    name = source.name
    if kind == "triton":
        try:
            ast.parse(text, filename=name)
        except SyntaxError as e:
            raise AstraError(f"{name} is not Python (line {e.lineno}: {e.msg}): a triton patch is a Triton .py "
                             "source; a .cuh is a cuda_jit patch") from None
        findings = screen_python(text)
    else:
        full = materialize(op_dir, user_cache())
        findings = screen_cuda(text, cuda_search_dirs(full, op), full)
    if findings:
        raise AstraError(f"{name} refused by the static screen: {findings[0]}")
    entry = entry_and_call(op, kind)[0]
    if kind == "triton":
        _import_triton(source, entry, materialize(op_dir, user_cache()))
        return f"screen passed; imported under TRITON_INTERPRET=1, defines {entry}"
    return _build_cuda(full, op, source, dtypes)


def _import_triton(source: Path, entry: str, full: Path) -> None:
    """Import ``source`` in a child under TRITON_INTERPRET=1 as a server would load it: among the vendored SGLang
    modules of the op folder ``full`` (completed with SGLang's files: ``materialize``) where its recipe has a
    closure (fused MoE's kernel module imports srt utilities whose installed package chain needs torchvision: a
    bare import refused the MoE retune here, 2026-12-06)."""
    code = ("import sys\nfrom pathlib import Path\nfrom astra_sglang.errors import AstraError\n"
            "from astra_sglang.contract.op import load_manifest\n"
            "from astra_sglang.loader.pyimport import load_triton_wrapper\n"
            "try:\n    op_dir = Path(sys.argv[3])\n"
            "    load_triton_wrapper(Path(sys.argv[1]), sys.argv[2], getattr(load_manifest(op_dir).recipe, "
            "'closure', None), op_dir)\n"
            "except AstraError as e:\n    print(' '.join(str(e).split())[:400], file=sys.stderr)\n    sys.exit(3)\n")
    env = dict(os.environ, TRITON_INTERPRET="1")
    try:
        proc = subprocess.run([sys.executable, "-c", code, str(source.resolve()), entry, str(full)], env=env,
                              capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise AstraError(f"importing {source.name} took over {IMPORT_TIMEOUT_S} s; refused") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise AstraError(f"{source.name} does not import: {last}")


def _build_cuda(op_dir: Path, op: Manifest, source: Path, dtypes: list[str]) -> str:
    from astra_sglang.harness.parent.module_imports import check_module
    from astra_sglang.loader import toolchain
    from astra_sglang.loader.cuda_build import BuildError, CudaBuildSpec, build_batch

    try:
        toolchain.nvcc_path()
        toolchain.ninja_path()
    except AstraError as e:
        return f"screen passed; NOT built here ({e})"
    specs = [CudaBuildSpec.from_recipe(op_dir, op, d, kernel_source=source) for d in dtypes]
    for spec, d, outcome in zip(specs, dtypes, build_batch(specs)):
        if isinstance(outcome, Exception):
            log = outcome.report.log if isinstance(outcome, BuildError) else str(outcome)
            first = next((ln for ln in log.splitlines() if "error" in ln.lower()), log.strip().splitlines()[-1:] or [""])
            reason = " ".join(str(first).replace(str(source.resolve()), source.name).split())
            raise AstraError(f"{source.name} does not build ({d}): {reason[:400]}")
        refusal = check_module(spec, outcome.so_path)  # the screen is a first filter; the linker says what it calls
        if refusal is not None:
            raise AstraError(f"{source.name} ({d}): {refusal}")
    return f"screen passed; built for {', '.join(dtypes)} ({specs[0].arch}, not loaded)"


def default_guard(op: str) -> GuardSpec:
    """Where a patch of ``op`` may serve before anything is measured: the op adapter's ranges inside the op
    contract's bounds (``within_contract``) and the span of its shapes (``within_shapes``). Every guard a command
    derives starts here."""
    from astra_sglang.patches.adapters import get_adapter

    return guard_default(get_adapter(op), load_manifest(op_folder(op)))


def unseen_sizes(op: str) -> tuple[str, ...]:
    """The sizes of ``op``'s calls its guard cannot see (``OpAdapter.unseen_sizes``), for ``derive_guard``."""
    from astra_sglang.patches.adapters import get_adapter

    return get_adapter(op).unseen_sizes


def guard_default(adapter: OpAdapter, manifest: Manifest) -> GuardSpec:
    return within_shapes(within_contract(adapter.default_guard(), manifest), manifest)


def guard_from_evidence(op: str, results: list[EvalResult]) -> tuple[GuardSpec | None, list[GuardRow], str]:
    """The guard a patch gets from its measurements, whichever command registers it: where it won, never the
    adapter's widest. A decode_attention patch added with `patches add --evidence` once got B 1..4096, G 1..16,
    D 64..256 (none of G 1, D 64 or D 256 measured) while `add-run` derived its guard. (None, [], why) when the
    evidence times no shape of the op's dims: the adapter's default guard then, said in the note."""

    base = default_guard(op)
    rows = [r for r in measured_rows(results) if set(base.dims) <= set(r.dims)]
    if not rows:
        return None, [], ("guard: the op adapter's default; the evidence times no shape of this op's dims (measure "
                          "it with `bench OP --candidate F --shapes all --heldout --json` and run `patches guard`)")
    guard, table = derive_guard(base, rows, unseen_sizes(op))
    return guard, table, f"guard derived from {len(table)} measured shape(s): {describe(guard)}"


def load_evidence(paths: list[Path]) -> Evidence:
    """EvalResult JSON files (one result, or a list of them) -> Evidence."""
    from astra_sglang.contract.result import EvalResult

    results = []
    for p in paths:
        try:
            raw = json.loads(Path(p).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise AstraError(f"evidence {p}: not readable JSON ({e})") from None
        items = raw if isinstance(raw, list) else [raw]
        for it in items:
            try:
                results.append(EvalResult.model_validate(it))
            except Exception as e:
                raise AstraError(f"evidence {p}: not a harness EvalResult ({type(e).__name__})") from None
    return Evidence(results=results)


# what best/summary.json (loop/optimizer.py write_best) and run.json say about the run, first file wins
_RUN_KEYS = ("model", "rounds", "label", "mode", "candidates_per_round", "source_sha256")


def add_from_run(
    run_dir: Path,
    *,
    patch_id: str | None = None,
    op: str | None = None,
    model: str | None = None,
    rounds: int | None = None,
    root: Path | None = None,
    force: bool = False,
    sglang_versions: list[str] | None = None,
    archs: list[str] | None = None,
    guard: GuardSpec | None = None,
    evidence_paths: list[Path] | None = None,
) -> Path:
    """Register the winner of an optimizer run (``runs/<op>/<run-id>/best/``) as a patch.

    ``best/`` must hold exactly one kernel source (``*.cuh`` or ``*.py``); every ``*.json`` in it that parses
    as a harness EvalResult becomes evidence, with ``evidence_paths`` (the winner measured over more shapes:
    ``bench OP --candidate F --shapes all --heldout --json``). Without an explicit ``guard`` the guard is derived
    from every timed shape of that evidence (``tooling.guard``): the patch serves where it beat what SGLang serves.
    ``model``/``rounds`` default to what ``best/``'s or the run's JSON files say; label, mode and the winner's
    hash come from them too (``_RUN_KEYS``).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise AstraError(f"run folder {run_dir} does not exist")
    best = run_dir / "best" if (run_dir / "best").is_dir() else run_dir
    if best == run_dir and not (run_dir / "best").exists() and (run_dir / "run.json").is_file():
        raise AstraError(f"{run_dir} has no winner (no best/ folder): none of its rounds produced a correct, timed "
                         "candidate; see `astra-sglang report` for each round's verdicts")
    seed = _winning_seed(run_dir)
    if seed:
        raise AstraError(f"{run_dir}'s winner is its seed ({seed}): no round of this run beat it, and this run did not "
                         "write it; register the run the seed came from")
    sources = sorted(p for p in best.iterdir() if p.suffix in (".cuh", ".py") and p.is_file()) if best.is_dir() else []
    if len(sources) != 1:
        raise AstraError(f"{best}: expected one kernel source (*.cuh or *.py), found {len(sources)}")
    op = op or run_dir.parent.name
    results, meta = [], {}
    from astra_sglang.contract.result import EvalResult

    for p in sorted(best.glob("*.json")) + sorted(run_dir.glob("*.json")):
        try:
            raw = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        for it in raw if isinstance(raw, list) else [raw]:
            if not isinstance(it, dict):
                continue
            try:
                results.append(EvalResult.model_validate(it))
            except Exception:
                meta.update({k: it[k] for k in _RUN_KEYS if k in it and k not in meta})
    mode = meta.get("mode")
    if mode and meta.get("candidates_per_round"):
        mode = f"{mode}, K={meta['candidates_per_round']}"
    prov = Provenance(
        kind="run",
        run=str(run_dir),
        model=model or meta.get("model"),
        rounds=rounds if rounds is not None else meta.get("rounds"),
        label=meta.get("label"), mode=mode, candidate_sha256=meta.get("source_sha256") or sha256_file(sources[0]),
    )
    notes = [sweep_note(run_dir, results, force)] if results else []
    results += load_evidence(list(evidence_paths or [])).results
    table: list[GuardRow] = []
    if guard is None:
        guard, table, note = guard_from_evidence(op, results)
        notes.append(note)
    return add_patch(op, sources[0], patch_id=patch_id or f"{run_dir.name}", provenance=prov,
                     evidence=Evidence(results=results, notes=notes, guard_table=table), root=root, force=force,
                     sglang_versions=sglang_versions, archs=archs, guard=guard)


def _winning_seed(run_dir: Path) -> str | None:
    """A seeded run (``optimize --seed-kernel``) whose winner is round 1, the seed: where the seed came from."""
    try:
        raw = json.loads((run_dir / "run.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    seed = (raw.get("options") or {}).get("seed_kernel")
    return seed if seed and (raw.get("winner") or {}).get("round") == 1 else None


def rederive_guard(patch_id: str, evidence_paths: list[Path], *, root: Path | None = None,
                   write: bool = False, behind: str | None = None) -> tuple[PatchManifest, list[GuardRow]]:
    """A registered patch's guard derived again from its evidence plus new measurements (``evidence_paths``), and
    its check shapes moved inside it; written to its manifest with ``write``. The kernel and its pins are untouched:
    only where it serves changes, which the plugin's first-call check then covers. ``behind``: a retune of the
    same op; the guard derived is the one for standing in front of it (``guard_in_front``, ``rows_behind``), and
    the patch's own guard, for standing alone, is left as it is."""
    from astra_sglang.contract.patch import load_patch_manifest
    from astra_sglang.patches.registry import find

    entry = find(patch_id, root)
    m = load_patch_manifest(entry.path)
    new = load_evidence(evidence_paths).results
    known = {r.model_dump_json() for r in m.evidence.results}
    results = [*m.evidence.results, *(r for r in new if r.model_dump_json() not in known)]
    if behind is not None:
        return _guard_in_front(entry.path, m, results, behind, root, write)
    updated, table = guard_from_records(m, results)
    if write:
        write_patch_manifest(entry.path, updated)
    return updated, table


def guard_from_records(m: PatchManifest, results: list[EvalResult]) -> tuple[PatchManifest, list[GuardRow]]:
    """``m`` with ``results`` as its evidence, its guard derived from them (per GPU) and its check shapes moved
    inside it; AstraError where it won nowhere. ``patches guard`` and ``patches verify --record`` share it."""
    from astra_sglang.patches.adapters import get_adapter

    guard, table = derive_guard(default_guard(m.op), measured_rows(results), unseen_sizes(m.op))
    note = f"guard derived from {len(table)} measured shape(s) (`patches guard`): {describe(guard)}"
    notes = [n for n in m.evidence.notes if not n.startswith("guard derived from")] + [note]
    return m.model_copy(update={
        "guard": guard,
        "check_shapes": covered_check_shapes(get_adapter(m.op).default_check_shapes(), guard),
        "evidence": m.evidence.model_copy(update={"results": results, "notes": notes, "guard_table": table}),
    }), table


def _guard_in_front(path: Path, m: PatchManifest, results: list[EvalResult], behind: str, root: Path | None,
                    write: bool) -> tuple[PatchManifest, list[GuardRow]]:
    """``rederive_guard --behind``: the rewrite's guard in front of the retune ``behind``, inside its own guard."""
    from astra_sglang.contract.patch import load_patch_manifest
    from astra_sglang.patches.registry import find

    inner = load_patch_manifest(find(behind, root).path)
    if not inner.source.retune or inner.op != m.op:
        raise AstraError(f"{behind} is not a retune of {m.op} (`patches add-retune`): only a retune of its op "
                         f"stands behind {m.patch_id}")
    if m.source.retune:
        raise AstraError(f"{m.patch_id} is a retune itself: a retune stands behind a rewrite, never in front")
    rows = rows_behind(results, inner.evidence.results, inner.guard, behind)
    if not any(r.served_by == behind for r in rows):
        raise AstraError(f"no shape of {m.patch_id}'s evidence was timed for {behind} on the same GPU inside its "
                         f"guard: `patches verify {behind} --record` on that GPU first")
    # a shape outside the patch's own guard (on the GPU the row was timed on) is a loss here too, so no run of wins
    # is joined across it
    guard, table = derive_guard(m.guard, [r if m.guard.takes(r.dims, r.dtype, r.gpu)
                                          else r.model_copy(update={"wins": False}) for r in rows],
                                unseen_sizes(m.op))
    lost = [r for r in table if r.served_by == behind and not r.wins]
    note = (f"guard in front of {behind} derived from {len(table)} measured shape(s) (`patches guard --behind`): "
            f"{describe(guard)}; left to {behind}: "
            + ("; ".join(f"{'x'.join(map(str, r.dims.values()))} {r.dtype} ({r.speedup:.3f}x of it)" for r in lost)
               or "nothing"))
    notes = [n for n in m.evidence.notes if not n.startswith(f"guard in front of {behind} ")] + [note]
    updated = m.model_copy(update={"guard_in_front": {**m.guard_in_front, behind: guard},
                                   "evidence": m.evidence.model_copy(update={"results": results, "notes": notes})})
    if write:
        write_patch_manifest(path, updated)
    return updated, table


def sweep_note(run_dir: Path, results: list[EvalResult], force: bool) -> str:
    """The winner against the run's round-0 sweep baseline (the original's own tunables swept), per timed shape.

    A winner that a mechanical sweep of SGLang's kernel matches is no reason to replace SGLang's kernel: it is
    refused unless ``force``. Shapes are matched by dims and dtype; the sweep's speedup is over the original."""
    from astra_sglang.loop.records import TuneOutcome
    from astra_sglang.loop.runfolder import RunFolder
    from astra_sglang.loop.winner import same_gpu_text

    outcome = RunFolder(run_dir).load_step(0, "tune", TuneOutcome)
    base = outcome.baseline if outcome is not None else None
    sweep = {(json.dumps(s.dims, sort_keys=True), s.dtype): s.speedup for s in (base.shapes if base else [])
             if s.speedup}
    timed = [r for r in results if r.timing is not None and r.timing.shapes]
    if not timed:
        return "sweep baseline: the run's winner has no timing to compare"
    if not sweep or base is None:
        why = (outcome.error if outcome is not None else None) or "no round-0 sweep baseline in the run"
        return f"sweep baseline: none ({why[:200]})"
    timing = next((r.timing for r in timed if same_gpu_text(r.device, base.device)), None)
    if timing is None:  # speedups over SGLang on two GPUs are not comparable
        return (f"sweep baseline: timed on {base.device}, the winner only on "
                f"{', '.join(sorted({r.device for r in timed}))}: not compared")
    rows, losses = [], []
    for s in timing.shapes:
        key = (json.dumps(s.dims, sort_keys=True), s.dtype)
        if s.speedup is None or key not in sweep:
            continue
        rows.append(f"{'x'.join(str(v) for v in s.dims.values())} {s.dtype}: {s.speedup:.3f}x vs sweep "
                    f"{sweep[key]:.3f}x")
        if s.speedup <= sweep[key]:
            losses.append(rows[-1])
    if losses and not force:
        raise AstraError(f"the run's winner does not beat the sweep baseline on {len(losses)} shape(s) "
                         f"({losses[0]}); pass --force to register it anyway")
    verdict = "beats it on every timed shape" if not losses else f"does NOT beat it on {len(losses)} shape(s)"
    return f"sweep baseline (the original's tunables swept, round 0): the winner {verdict}: {'; '.join(rows)}"


def narrowed_guard(base: GuardSpec, items: list[str]) -> GuardSpec:
    """``base`` with the dims named in ``items`` ('T=1:512') narrowed; a dim the guard lacks, or a range wider
    than the base's, is refused: a run winner may only serve less than the op adapter allows, never more."""
    dims = dict(base.dims)
    for item in items:
        name, eq, rng = item.partition("=")
        lo, colon, hi = rng.partition(":")
        if not eq or not colon or name not in dims or not lo.isdigit() or not hi.isdigit():
            raise AstraError(f"--guard-dim {item!r}: expected DIM=MIN:MAX with DIM one of {sorted(dims)}")
        old = dims[name]
        new = old.model_copy(update={"min": int(lo), "max": int(hi)})
        if new.min < old.min or (old.max is not None and new.max is not None and new.max > old.max) or new.min > (new.max or 0):
            raise AstraError(f"--guard-dim {item!r}: must lie inside the adapter's {name} range "
                             f"[{old.min}, {old.max}]")
        dims[name] = new
    return base.model_copy(update={"dims": dims})


def covered_check_shapes(shapes: list[dict[str, int]], guard: GuardSpec, limit: int = 4) -> list[dict[str, int]]:
    """The adapter's check shapes moved inside the guard (each dim clamped to its range and multiple), so the
    plugin's first-call check runs on calls the patch will really serve; duplicates dropped, order kept. With
    regions, every region gets a check shape before any gets a second (at most ``limit`` in all: the check runs in
    each server process before the first call is served)."""
    def moved(shape: dict[str, int], ranges: dict[str, DimRange]) -> dict[str, int]:
        out = dict(shape)
        for name in shape:
            for r in (guard.dims.get(name), ranges.get(name)):
                if r is not None:
                    out[name] = fit_dim(out[name], r.min, r.max, r.multiple_of)
        return out

    if not guard.regions:
        return _unique([moved(s, {}) for s in shapes])
    per_region = [_unique([m for s in shapes if guard.accepts_dims(m := moved(s, box))]) for box in guard.regions]
    picked: list[dict[str, int]] = []
    for depth in range(max(len(x) for x in per_region)):
        for found in per_region:
            if depth < len(found) and found[depth] not in picked and len(picked) < max(limit, min(len(per_region), 8)):
                picked.append(found[depth])
    return picked


def _unique(shapes: list[dict[str, int]]) -> list[dict[str, int]]:
    out: list[dict[str, int]] = []
    for s in shapes:
        if s not in out:
            out.append(s)
    return out
