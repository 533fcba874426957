"""``astra-sglang patches list | show ID | status | verify [ID] | enable ID | disable ID | add ... | add-run RUN``."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from astra_sglang.cli.args import existing_file, positive_int
from astra_sglang.errors import AstraError
from astra_sglang.patches.adapters import adapter_ops


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("patches", help="the patch registry: list, show, verify, enable, disable, add")
    sub = p.add_subparsers(dest="patches_command", metavar="ACTION")
    ls = sub.add_parser("list", help="every patch: enabled, applicable here, validated here, and why not")
    ls.add_argument("--json", action="store_true", help="print the rows as JSON")
    ls.set_defaults(handler=cmd_list)
    sh = sub.add_parser("show", help="one patch's manifest, provenance and evidence")
    sh.add_argument("patch_id", help="the patch's id (see `patches list`)")
    sh.add_argument("--json", action="store_true", help="print the manifest as JSON")
    sh.set_defaults(handler=cmd_show)
    v = sub.add_parser("verify", help="rebuild and re-check against the installed SGLang on this device")
    v.add_argument("patch_id", nargs="?", help="the patch to verify (default: every patch)")
    v.add_argument("--shapes", default="all", choices=["paper", "decode", "prefill", "all", "test"],
                   help="harness shape set to check and time; 'test' = tiny shapes for CPU runs")
    v.add_argument("--no-harness", action="store_true", help="only the plugin's own check, no harness run")
    v.add_argument("--record", action="store_true",
                   help="on success, add this SGLang version, arch and GPU model to the manifest's validated_on "
                        "and the harness result to its evidence; where it was slower inside its guard, or the GPU "
                        "is new to it, its guard is derived again from every record, per GPU (default: off)")
    v.add_argument("--twins-only", action="store_true",
                   help="time only the short-context twins of --shapes (decode attention at S 512; the contract's other "
                        "shapes checked as in any run): for a patch whose records already time that set on this GPU")
    v.set_defaults(handler=cmd_verify)
    st = sub.add_parser("status", help="what a running server's processes patched: states, calls, fallbacks")
    st.add_argument("--dir", type=Path, help="a status folder (default: $ASTRA_SGLANG_STATUS_DIR or the cache's); "
                    "one server's pg-<pgid> folder, or the folder holding them")
    st.add_argument("--json", action="store_true", help="print each server's aggregated records as JSON")
    st.add_argument("--all", action="store_true",
                    help="also the tables of servers none of whose processes runs any more (stale records)")
    st.set_defaults(handler=cmd_status)
    for name, on in (("enable", True), ("disable", False)):
        e = sub.add_parser(name, help=f"{name} a patch for ASTRA_SGLANG_PATCHES=all (persisted per user)")
        e.add_argument("patch_id", help="the patch's id (see `patches list`)")
        e.set_defaults(handler=lambda a, on=on: cmd_enable(a, on))
    a = sub.add_parser("add", help="register a kernel source as a patch (one command after measuring it)")
    a.add_argument("--op", required=True, choices=adapter_ops(),
                   help="the extracted op the kernel replaces")
    a.add_argument("--source", required=True, type=Path, help="a .cuh (cuda_jit) or a Triton .py")
    a.add_argument("--id", dest="patch_id", required=True, help="patch id: its folder is patches/<op>/<id>")
    a.add_argument("--provenance", required=True, choices=["hand-written", "scripted", "run"],
                   help="who wrote the kernel: a person, a script (developers' candidate), or an optimizer run")
    a.add_argument("--evidence", type=Path, action="append", default=[],
                   help="harness EvalResult JSON (bench --json / evaluate output); repeatable")
    a.add_argument("--sglang-version", action="append", help="validated on (default: from the evidence)")
    a.add_argument("--arch", action="append", help="validated on, e.g. sm_90 (default: from the evidence)")
    a.add_argument("--kind", choices=["triton", "cuda_jit"], help="the source's kind (default: .py = triton, else cuda_jit)")
    a.add_argument("--target", action="append",
                   help="HookRegistry target to replace, one of the op's call sites (default: its entry point)")
    a.add_argument("--run", help="the run it came from (provenance 'run')")
    a.add_argument("--model", help="the model that wrote the kernel (recorded in the provenance)")
    a.add_argument("--rounds", type=int, help="optimizer rounds it took (recorded in the provenance)")
    a.add_argument("--author", help="who wrote or submitted it (recorded in the provenance)")
    a.add_argument("--note", default="", help="free text recorded in the provenance (default: none)")
    a.add_argument("--description", default="", help="what the patch does, for its manifest (default: none)")
    a.add_argument("--force", action="store_true", help="replace an existing patch folder of that id")
    a.set_defaults(handler=cmd_add)
    r = sub.add_parser("add-run", help="register an optimizer run's winner (runs/<op>/<id>/best/)")
    r.add_argument("run_dir", type=Path, help="the run folder (runs/<op>/<run-id>) or its best/ folder")
    r.add_argument("--id", dest="patch_id", help="patch id (default: the run folder's name)")
    r.add_argument("--model", help="the model to record (default: what the run recorded)")
    r.add_argument("--rounds", type=int, help="the rounds to record (default: what the run recorded)")
    r.add_argument("--force", action="store_true", help="replace an existing patch folder of that id")
    r.add_argument("--sglang-version", action="append", help="validated on (default: from the run's results)")
    r.add_argument("--arch", action="append", help="validated on, e.g. sm_90 (default: from the run's results)")
    r.add_argument("--guard-dim", action="append", default=[], metavar="DIM=MIN:MAX",
                   help="narrow the op adapter's default guard for one dim (e.g. T=1:512 where the winner measured "
                        "slower than what SGLang serves above 512 rows); repeatable")
    r.add_argument("--evidence", type=Path, action="append", default=[],
                   help="the winner measured over more shapes (`bench OP --candidate F --shapes all --heldout "
                        "--json`); the guard is derived from every timed shape; repeatable")
    r.set_defaults(handler=cmd_add_run)
    rt = sub.add_parser("add-retune", help="register SGLang's own kernel under the launch configs its sweep "
                                           "baseline found (no kernel code: the configs, applied at load)")
    rt.add_argument("op", help="the extracted op (a Triton one)")
    rt.add_argument("--sweep", type=Path, required=True,
                    help="the GPU sweep: extracted/<op>/tune_baseline.json, a queue's <item>/baseline.json or a "
                         "run's rounds/r000/tune.json")
    rt.add_argument("--id", dest="patch_id", required=True, help="patch id")
    rt.add_argument("--min-gain-pct", type=float, default=2.0,
                    help="serve a shape only where its bucket's config beat SGLang's by more than this and the "
                         "spread (default 2)")
    rt.add_argument("--force", action="store_true", help="replace an existing patch folder of that id")
    rt.add_argument("--not-in-all", action="store_true",
                    help="serve it only where ASTRA_SGLANG_PATCHES names its id, never under 'all'")
    rt.set_defaults(handler=cmd_add_retune)
    g = sub.add_parser("guard", help="derive a patch's guard from per-shape measurements: it serves exactly where it "
                                     "beat what SGLang serves, beyond the spread")
    g.add_argument("patch_id", help="the patch's id (see `patches list`)")
    g.add_argument("--evidence", type=Path, action="append", default=[],
                   help="harness EvalResult JSON of the patch's kernel (`bench OP --candidate PATCH/kernel --shapes "
                        "all --heldout --json` on the GPU); repeatable; added to the patch's evidence. Without it, "
                        "the records its manifest holds (`patches verify ID --record` adds each)")
    g.add_argument("--behind", metavar="RETUNE_ID", default=None,
                   help="derive the guard the patch serves in front of this retune of its op (stacked): where it "
                        "beat the retune too, each over SGLang's original on the same GPU; its own guard is kept "
                        "for standing alone. The patch's evidence alone is used when no --evidence is given")
    g.add_argument("--write", action="store_true",
                   help="write the derived guard, check shapes and evidence table into the patch's manifest "
                        "(default: print them only)")
    g.add_argument("--json", action="store_true", help="print the derived guard and the table as JSON")
    g.set_defaults(handler=cmd_guard)
    c = sub.add_parser("coverage", help="which patch would serve each call a model's forward makes, from its "
                                        "config alone (no GPU), and why not")
    src = c.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", metavar="NAME", help="a known model's dims (as `profile --config`: llama3-8b, "
                                                      "qwen3-8b, qwen3-30b-a3b, mixtral-8x7b, deepseek-v2-lite)")
    src.add_argument("--model-config", type=existing_file, metavar="FILE", help="a model's config.json")
    c.add_argument("--batch-size", type=positive_int, nargs="+", default=None, metavar="BS",
                   help="batch sizes (default 1 32 128)")
    c.add_argument("--phase", choices=["decode", "prefill", "both"], default="decode", help="(default: decode)")
    c.add_argument("--input-len", type=positive_int, default=1024, help="prompt tokens (default: 1024)")
    c.add_argument("--output-len", type=positive_int, default=16,
                   help="new tokens (default: 16, as one_batch): the decode calls' mean KV length, prompt + half "
                        "of these, picks the record each forecast is read from")
    c.add_argument("--page-size", type=positive_int, default=1, help="SGLang's --page-size (default: 1)")
    c.add_argument("--dtype", help="the dtype SGLang runs (default: the config's, bfloat16 when none)")
    c.add_argument("--gpu", metavar="NAME", help="the GPU the server runs on, as torch names it (e.g. 'NVIDIA "
                                                 "H200'): a patch measured on other GPUs only stands aside there")
    c.add_argument("--patches", default="all", metavar="IDS",
                   help="comma-separated patch ids, as ASTRA_SGLANG_PATCHES takes them (default: all)")
    c.add_argument("--attention-backend", metavar="NAME",
                   help="SGLang's --attention-backend (default: the one SGLang 0.5.23 picks for this model on --gpu: "
                        "fa3 on an H100/H200, so no decode-attention patch serves there unless this says triton)")
    c.add_argument("--json", action="store_true", help="print the rows as JSON")
    c.set_defaults(handler=cmd_coverage)
    p.set_defaults(handler=lambda args: (p.print_help(), 2)[1])


def _console():
    from astra_sglang.cli.output import console

    return console()


def _rows() -> list[dict]:
    from astra_sglang.patches.registry import (
        build_problem,
        device_problem,
        discover,
        installed_sglang_version,
        load_state,
        selected,
        static_problem,
        validated_here,
    )
    from astra_sglang.platform_info import current

    here = current()
    version, arch, gpu = installed_sglang_version(), here.arch, here.gpu
    disabled = set(load_state().disabled)
    entries = discover()
    # what the plugin would install under this environment: the registry's own choice (`all` leaves out a patch
    # whose manifest has in_all false), not a second reading of ASTRA_SGLANG_PATCHES
    active = {e.patch_id for e in selected(entries)[0]}
    rows = []
    for e in entries:
        problem = static_problem(e, version) or (device_problem(e.manifest, arch, gpu) if e.manifest else None)
        vh, why = validated_here(e, version, arch, gpu)
        m = e.manifest
        # the headline is a record of the named set: short-context twins alone (`verify --twins-only`) are not one
        geo = [r.geomean_speedup for r in m.evidence.results
               if r.geomean_speedup and not (r.timing and r.timing.extra_only)] if m else []
        cannot_build = build_problem(m) if m else "unreadable manifest"
        rows.append({
            "patch_id": e.patch_id,
            "op": e.op,
            "kind": m.source.kind if m else "?",
            # a retune carries no kernel code of its own: "hand-written" (its manifest's kind) would say otherwise
            "provenance": ("retune (sweep)" if m.source.retune else m.provenance.kind) if m else "?",
            "enabled": e.patch_id not in disabled,
            "in_all": m.in_all if m else False,
            "active_in_env": e.patch_id in active,
            "applicable": problem is None,
            "why_not": problem or "",
            "validated_here": vh,
            "validated_why": why,
            "builds_here": cannot_build is None,
            "build_why": cannot_build or "",
            "geomean_speedup": geo[-1] if geo else None,
            "path": str(e.path),
        })
    return rows


def cmd_list(args: argparse.Namespace) -> int:
    from astra_sglang.patches.registry import installed_sglang_version, patches_root
    from astra_sglang.platform_info import current

    if not patches_root().is_dir():
        raise AstraError(f"patch folder {patches_root()} does not exist (ASTRA_SGLANG_PATCHES_DIR="
                         f"{os.environ.get('ASTRA_SGLANG_PATCHES_DIR', '')!r})")
    rows = _rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from astra_sglang.cli.output import Table

    t = Table(title=f"patches in {patches_root()}  (SGLang {installed_sglang_version() or 'not installed'}, "
                    f"device {current().arch or 'none'}, ASTRA_SGLANG_PATCHES={os.environ.get('ASTRA_SGLANG_PATCHES', '')!r})")
    for col in ("patch", "op", "kind", "provenance", "enabled", "applicable here", "validated here", "builds here",
                "speedup"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["patch_id"], r["op"], r["kind"], r["provenance"],
                  ("yes" if r["in_all"] else "named only (not in all)") if r["enabled"] else "no",
                  "yes" if r["applicable"] else f"no: {r['why_not']}",
                  "yes" if r["validated_here"] else f"no: {r['validated_why']}",
                  "yes" if r["builds_here"] else f"no: {r['build_why'].removeprefix('cannot build here: ')}",
                  f"{r['geomean_speedup']:.3f}x" if r["geomean_speedup"] else "-")
    _console().print(t)
    if not rows:
        print("no patches; add one with `astra-sglang patches add` or `patches add-run`")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from astra_sglang.patches.registry import find

    e = find(args.patch_id)
    if e.manifest is None:
        raise AstraError(f"{e.path}: {e.error}")
    m = e.manifest
    if args.json:
        print(m.model_dump_json(indent=2, exclude_none=True))
        return 0
    from astra_sglang.cli.output import Table

    c = _console()
    c.print(f"[bold]{m.patch_id}[/bold]  op {m.op}  ({m.source.kind}: {m.source.file}; called as the op manifest says)")
    c.print(m.description)
    c.print(f"path: {e.path}")
    c.print("targets: " + ", ".join(m.targets))
    c.print(f"validated on: SGLang {', '.join(m.validated_on.sglang_versions) or '-'}; archs "
            f"{', '.join(m.validated_on.archs) or '-'}")
    dims = "; ".join(f"{k} in [{r.min}, {r.max if r.max is not None else 'inf'}] x{r.multiple_of}"
                     for k, r in m.guard.dims.items())
    c.print(f"guard: dtypes {', '.join(m.guard.dtypes)}; {dims}; align {m.guard.align_bytes} B; "
            f"{'contiguous' if m.guard.contiguous else 'any layout'}")
    from astra_sglang.patches.tooling.guard import describe

    if m.guard.regions:
        c.print(f"serves (alone): {describe(m.guard)}", markup=False)
    for inner, g in m.guard_in_front.items():
        c.print(f"serves in front of {inner} (stacked; the rest goes to it): {describe(g)}", markup=False)
    p = m.provenance
    c.print(f"provenance: {p.kind}" + "".join(f"; {k} {v}" for k, v in
            (("run", p.run), ("model", p.model), ("rounds", p.rounds), ("author", p.author)) if v)
            + (f" ({p.note})" if p.note else ""))
    c.print("files: " + ", ".join(f"{f.path} {f.sha256[:12]}" for f in m.files))
    for r in m.evidence.results:
        corr = r.correctness
        c.print(f"evidence: {r.device}, SGLang {r.sglang_version}: correct={r.ok} "
                f"(cases {corr.cases_run if corr else 0}, held-out {corr.heldout_cases_run if corr else 0})")
        if r.timing:
            t = Table()
            for col in ("dims", "dtype", "original us", "patch us", "speedup", "verdict"):
                t.add_column(col)
            for s in r.timing.shapes:
                t.add_row(str(s.dims), s.dtype, f"{s.original_us:.2f}",
                          f"{s.candidate_us:.2f}" if s.candidate_us else "-",
                          f"{s.speedup:.3f}x" if s.speedup else "-", s.verdict)
            c.print(t)
            if r.timing.geomean_speedup:
                timed = f" over {r.timing.shape_set}" if r.timing.shape_set else ""
                c.print(f"geomean speedup {r.timing.geomean_speedup:.3f}x{timed} ({r.timing.method})")
    for n in m.evidence.notes:
        c.print(f"note: {n}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    import sys

    from astra_sglang.patches.registry import discover, find
    from astra_sglang.patches.tooling.verify import slower_shapes, verify_entry

    def progress(line: str) -> None:  # stderr: a check can take minutes; stdout keeps only the verdicts
        print(line, file=sys.stderr, flush=True)

    entries = [find(args.patch_id)] if args.patch_id else discover()
    if not entries:
        raise AstraError("no patches to verify")
    failed = 0
    for e in entries:
        out = verify_entry(e, shapes=args.shapes, harness=not args.no_harness, record=args.record, progress=progress,
                           twins_only=args.twins_only)
        verdict = "OK" if out.ok else "FAILED" if out.here else "NOT VERIFIED"
        print(f"{e.patch_id}: {verdict} on {out.arch or 'no device'}: {out.detail}")
        for n in out.notes:
            print(f"  {n}")
        h = out.harness
        if h is not None and h.timing:
            for s in h.timing.shapes:
                sp = f"{s.speedup:.3f}x" if s.speedup else "-"
                print(f"  {s.dims} {s.dtype}: original {s.original_us:.2f} us, patch "
                      f"{s.candidate_us if s.candidate_us is not None else float('nan'):.2f} us, {sp} ({s.verdict})")
            if h.timing.geomean_speedup:
                print(f"  geomean {h.timing.geomean_speedup:.3f}x")
        failed += not out.ok
        split = slower_shapes(e.manifest, h) if e.manifest is not None else None
        slower = split[0] if split is not None else None
        if split is not None and split[1]:
            print(f"  slower outside its guard (SGLang's original serves them): {len(split[1])} shape(s)")
        if out.ok and args.record and out.arch == "cpu-interpret":
            print("  not recorded: an interpreter check is correctness-only (see above)")
        elif out.ok and args.record and slower is None:
            print("  not recorded: --record needs the harness's timing; " + (
                "run without --no-harness" if args.no_harness else
                "this patch is no harness candidate (see above), so verify cannot record it; "
                f"`pytest tests/test_acceptance_gpu.py -k {e.patch_id}` times it on the GPU host"))
        elif out.ok and args.record and e.manifest is not None and out.arch:
            _record(e, out, h, slower or [])
    return 1 if failed else 0


def _record(e: Any, out: Any, h: Any, slower: list[Any]) -> None:
    """``verify --record``'s write: validated here, the op pin moved, the harness result added to the evidence.
    Where the record is slower inside the guard the patch has on this GPU, or the GPU model is one it was never
    measured on, the guard is derived again from every record at once (per GPU: ``GuardSpec.gpu_regions``), so it
    serves only where it won there. Before, such a record was refused: the H100-measured decode-attention retune
    could never get an H200 guard of its own (its H100 guard rode on the H200 or nothing did), and a rewrite whose
    H200 boxes took a shape its new record lost kept serving it. Refused only where no guard can be derived."""
    from astra_sglang.contract.patch import write_patch_manifest
    from astra_sglang.patches.registry import gpu_problem, guard_problem, installed_sglang_version
    from astra_sglang.patches.tooling.add import guard_from_records
    from astra_sglang.patches.tooling.guard import describe
    from astra_sglang.platform_info import current

    m = e.manifest.model_copy(deep=True)
    vo = m.validated_on
    gpu = (current().gpu or "") if out.arch.startswith("sm_") else ""
    new_gpu = bool(gpu) and gpu_problem(m, gpu) is not None  # the GPU gate would have stood it aside here
    # served nothing here (no win at both ends of an unseen size), or timed the short-context twins: the guard is
    # derived again either way, else a twin record that lost nowhere left the H200's empty boxes as they were
    nothing_here = bool(gpu) and guard_problem(m, gpu) is not None
    twins = h is not None and h.timing is not None and h.timing.shape_set is not None
    version = installed_sglang_version()
    if version and version not in vo.sglang_versions:
        vo.sglang_versions.append(version)
    if out.arch not in vo.archs:
        vo.archs.append(out.arch)
    if new_gpu:
        vo.gpus.append(gpu)  # measured here now: its guard serves on this model too, where it won here
    m.op_manifest_sha256 = out.op_manifest_sha256
    if h is not None:
        m.evidence.results.append(h)
    derived = ""
    if slower or new_gpu or nothing_here or twins:
        try:
            m, _ = guard_from_records(m, m.evidence.results)
        except AstraError as err:
            if slower and not new_gpu:
                print(f"  not recorded: slower than the original on {len(slower)} shape(s) inside its guard, and "
                      f"no guard derives from its records ({err})")
                return
            print(f"  guard not derived again: {err}")
        else:
            derived = describe(m.guard)
    write_patch_manifest(e.path, m)
    print(f"  recorded: validated on SGLang {version} / {out.arch}" + (f" ({gpu})" if gpu else ""))
    if derived:
        why = (f"slower on {len(slower)} shape(s) inside its guard" if slower else f"a GPU new to it ({gpu})"
               if new_gpu else f"it served nothing on {gpu}" if nothing_here else "short-context twins timed")
        print(f"  guard derived again from every record, per GPU ({why}): {derived}")
        if m.source.retune:
            print(f"  a rewrite stacked in front of {m.patch_id}: `patches guard REWRITE --behind {m.patch_id} "
                  "--write` derives its guard there again")


def cmd_status(args: argparse.Namespace) -> int:
    from astra_sglang.patches.status_file import status_root
    from astra_sglang.patches.tooling.status_report import aggregate, server_dirs, stale_line

    root = Path(args.dir or status_root())
    dirs = server_dirs(root)
    servers = [aggregate(d) for d in dirs]
    if args.json:
        print(json.dumps({"servers": servers}, indent=2))
        return 0 if servers else 1
    if not servers:
        print(f"no status records under {root}: no server with ASTRA_SGLANG_PATCHES set wrote one")
        return 1
    from astra_sglang.cli.output import console

    # Records outlive their server: only the running ones get tables, unless asked for (--all, or a server's
    # own folder by --dir); the others are a line each, so old runs never pass for what is served now.
    named = dirs == [root]
    tables = [s for s in servers if args.all or named or not s["stale"]]
    if all(s["stale"] for s in servers) and not named:
        print(f"no server is running: no live process in the {len(servers)} server record folder(s) under {root}")
    c = console()
    for srv in tables:
        c.print(status_table(srv))
        if not srv["patches"]:
            print("  no patches selected in these processes")
        for u in srv["unreadable"]:
            print(f"  skipped {u}")
    for srv in servers:
        if srv not in tables:
            print(stale_line(srv))
    return 0


def status_table(srv: dict) -> object:
    """One server's aggregated records (``status_report.aggregate``) as the table ``patches status`` prints."""
    from astra_sglang.cli.output import Table, literal
    from astra_sglang.patches.tooling.status_report import states_text

    running = sum(p["running"] for p in srv["processes"])
    t = Table(title=f"{srv['dir']}: {len(srv['processes'])} process(es), {running} running",
              caption="captured = calls made during CUDA-graph capture; each graph replay reruns them "
                      "without a Python call, so they are counted once")
    stacked = any(r.get("passed_on") for r in srv["patches"])  # a rewrite with SGLang's kernel retuned behind it
    for col in ("patch", "op", "state per process", "patch calls", "original calls",
                *(("passed on",) if stacked else ()), "captured (patch/orig)", "first-call check",
                "fallbacks / reasons"):
        t.add_column(col)
    for r in srv["patches"]:
        states = r["states"].values()
        why = r["fallbacks"] or [x for x in r["reasons"] if {"failed", "inapplicable"} & set(states)]
        check = "; ".join(r["first_call_checks"]) or ("not run yet" if "pending" in states else "not run")
        t.add_row(r["patch_id"], r["op"], states_text(r["states"]), str(r["served_by_patch"]),
                  str(r["served_by_original"]), *((str(r.get("passed_on", 0)),) if stacked else ()),
                  f"{r['captured_by_patch']}/{r['captured_by_original']}", literal(check),
                  literal("; ".join(why) or "-"))
    return t


def cmd_enable(args: argparse.Namespace, on: bool) -> int:
    from astra_sglang.patches.tooling.state import set_enabled

    path = set_enabled(args.patch_id, on)
    print(f"{args.patch_id}: {'enabled' if on else 'disabled'} ({path}); ASTRA_SGLANG_PATCHES still decides per process")
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    from astra_sglang.contract.patch import Provenance
    from astra_sglang.patches.tooling.add import add_patch, guard_from_evidence, load_evidence

    prov = Provenance(kind=args.provenance, run=args.run, model=args.model, rounds=args.rounds,
                      author=args.author, note=args.note)
    evidence = load_evidence(args.evidence)
    guard = None
    if evidence.results:
        guard, table, note = guard_from_evidence(args.op, evidence.results)
        evidence = evidence.model_copy(update={"notes": [*evidence.notes, note], "guard_table": table})
    dest = add_patch(args.op, args.source, patch_id=args.patch_id, provenance=prov, evidence=evidence,
                     kind=args.kind, targets=args.target, guard=guard, sglang_versions=args.sglang_version,
                     archs=args.arch, description=args.description, force=args.force)
    _report_added(dest)
    return 0


def cmd_add_run(args: argparse.Namespace) -> int:
    from astra_sglang.patches.tooling.add import add_from_run, default_guard, narrowed_guard

    guard = None
    if args.guard_dim:
        guard = narrowed_guard(default_guard(args.run_dir.parent.name), args.guard_dim)
    dest = add_from_run(args.run_dir, patch_id=args.patch_id, model=args.model, rounds=args.rounds, force=args.force,
                        sglang_versions=args.sglang_version, archs=args.arch, guard=guard,
                        evidence_paths=args.evidence)
    _report_added(dest)
    return 0


def cmd_add_retune(args: argparse.Namespace) -> int:
    from astra_sglang.patches.tooling.retune_add import add_retune

    dest = add_retune(args.op, args.sweep, patch_id=args.patch_id, force=args.force, min_gain_pct=args.min_gain_pct,
                      in_all=not args.not_in_all)
    _report_added(dest)
    return 0


def cmd_guard(args: argparse.Namespace) -> int:
    from astra_sglang.patches.tooling.add import rederive_guard
    from astra_sglang.patches.tooling.guard import describe, guard_table_lines

    # without --evidence: the records already in the manifest (`patches verify ID --record` adds each), so a
    # record at new shapes (a contract revision) becomes a guard that serves them
    m, table = rederive_guard(args.patch_id, args.evidence, write=args.write, behind=args.behind)
    guard = m.guard if args.behind is None else m.guard_in_front[args.behind]
    if args.json:
        print(json.dumps({"patch_id": m.patch_id, "behind": args.behind, "guard": guard.model_dump(mode="json"),
                          "check_shapes": m.check_shapes, "table": [r.model_dump(mode="json") for r in table],
                          "written": args.write}, indent=2))
        return 0
    for line in guard_table_lines(table):
        print(line)
    where = f" in front of {args.behind}" if args.behind else ""
    print(f"guard of {m.patch_id}{where}: {describe(guard)}; check shapes {m.check_shapes}")
    print("written to its manifest" if args.write else "not written (pass --write)")
    return 0


def cmd_coverage(args: argparse.Namespace) -> int:
    from astra_sglang.patches.registry import discover, requested_ids, selected
    from astra_sglang.profile.configs import model_config
    from astra_sglang.profile.coverage import as_json, coverage, mean_decode_context, step_savings
    from astra_sglang.profile.traffic import load_config, model_dtype

    config = model_config(args.config) if args.config else load_config(args.model_config)
    if requested_ids(args.patches) is None:
        raise AstraError(f"--patches {args.patches!r} selects no patch")
    chosen, unknown = selected(discover(), args.patches)
    if unknown:
        raise AstraError(f"no patch {', '.join(unknown)} in the registry (see `patches list`)")
    manifests = [e.manifest for e in chosen if e.manifest is not None]
    phases = ["decode", "prefill"] if args.phase == "both" else [args.phase]
    dtype = model_dtype(config, args.dtype)
    rows, notes = coverage(config, manifests, args.batch_size or [1, 32, 128], phases, args.input_len, dtype, gpu=args.gpu,
                           page_size=args.page_size, attention_backend=args.attention_backend,
                           context=mean_decode_context(args.input_len, args.output_len))
    if args.json:
        print(json.dumps({"rows": as_json(rows), "notes": notes,
                          "step_savings": [x.model_dump() for x in step_savings(config, rows)] if args.gpu else []},
                         indent=2))
        return 0
    from astra_sglang.cli.output import Table

    name = args.config or str(args.model_config)
    t = Table(title=f"which patch serves {name}'s calls ({dtype}, input {args.input_len}, output {args.output_len}, "
                    f"page {args.page_size}, "
                    f"GPU {args.gpu or 'not named: no GPU gate'}; attention backend "
                    f"{args.attention_backend or 'SGLang default'}; patches {args.patches})")
    for col in ("phase", "batch", "op", "dims", "patch", "serves", "its record here (SGLang -> patch)"):
        t.add_column(col)
    for r in rows:
        t.add_row(r.phase, str(r.batch_size), r.op, " ".join(f"{k}={v}" for k, v in r.dims.items()), r.patch_id,
                  "yes" + r.why.removeprefix("serves") if r.serves else f"no: {r.why}",
                  r.record.text() if r.record else "-")
    _console().print(t)
    for step in step_savings(config, rows) if args.gpu else []:
        if step.parts or step.uncounted:
            print(f"{step.phase} bs {step.batch_size}: the records forecast {step.saved_us:,.0f} us less kernel time "
                  "a step" + "".join(f"; {x}" for x in step.parts) + "".join(f"; not counted: {x}"
                                                                             for x in step.uncounted))
    for note in notes:
        print(f"not judged: {note}")
    idle = sorted({r.patch_id for r in rows} - {r.patch_id for r in rows if r.serves})
    if idle:
        print(f"serving none of these calls: {', '.join(idle)}")
    return 0


def _report_added(dest: Path) -> None:
    from astra_sglang.contract.patch import load_patch_manifest

    m = load_patch_manifest(dest)
    vo = m.validated_on
    checked = next((n.removeprefix("patches add: ") for n in reversed(m.evidence.notes)
                    if n.startswith("patches add: ")), "")
    print(f"added {m.patch_id} at {dest} (validated on SGLang {', '.join(vo.sglang_versions)} / "
          f"{', '.join(vo.archs)}; {checked})")
