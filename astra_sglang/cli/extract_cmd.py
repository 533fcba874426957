"""``astra-sglang extract``: list SGLang's kernels, extract some into folders, add traced shapes to one."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from astra_sglang.errors import AstraError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "extract",
        help="pull SGLang kernels into stand-alone folders",
        description="Extract SGLang kernels (op id, 'module:attr', or an unambiguous short name) into OUT/<name>/.",
    )
    p.add_argument("ops", nargs="*", metavar="OP")
    p.add_argument("--out", type=Path, default=Path("extracted"), help="destination folder (default: extracted/)")
    p.add_argument("--list", action="store_true", help="list every kernel of the installed SGLang")
    p.add_argument("--json", action="store_true", help="with --list: JSON for machines")
    p.add_argument("--extractable", action="store_true", help="with --list: only the ops that can be extracted")
    p.add_argument("--check-load", action="store_true",
                   help="with --list: import every Triton op's vendored closure in a process without SGLang "
                        "(minutes) instead of the static answer")
    p.add_argument("--add-trace", type=Path, metavar="TRACE_JSON",
                   help="add shapes from a fused-op trace (get_fused_op_trace() as JSON) to the OP folders in --out")
    p.add_argument("--restore", action="store_true",
                   help="re-copy the SGLang/FlashInfer files of the folders in --out and verify every SHA-256")
    p.set_defaults(handler=run)


def _list(as_json: bool, only_extractable: bool, check_load: bool = False) -> int:
    from astra_sglang.extract.discovery import list_ops

    infos = list_ops()
    if check_load:
        from astra_sglang.extract.standalone_check import apply_check

        apply_check(infos)
    if only_extractable:
        infos = [i for i in infos if i.extractable]
    if as_json:
        print(json.dumps([i.model_dump() for i in infos], indent=1))
        return 0
    from astra_sglang.cli.output import Table, console

    loadable = sum(bool(i.standalone) for i in infos)
    table = Table(title=f"SGLang kernels ({len(infos)} ops, {sum(i.extractable for i in infos)} extractable, "
                        f"{loadable} loadable stand-alone{' (checked)' if check_load else ''})")
    for col in ("op", "backends", "source", "torch ref", "stand-alone", "extract"):
        table.add_column(col, overflow="fold")
    for i in infos:
        src = i.source_kind + (f" {', '.join(i.sources)}" if i.sources else "")
        verdict = f"yes -> {i.short_name}" if i.extractable else f"no: {i.reason}"
        alone = "" if i.standalone is None else "yes" if i.standalone else f"no: {i.standalone_reason}"
        table.add_row(i.op_id, ",".join(i.backends), src, "yes" if i.torch_reference else "", alone, verdict)
    console().print(table)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.list:
        return _list(args.json, args.extractable, args.check_load)
    if args.restore:
        from astra_sglang.extract.restore import restore_all

        for done in restore_all(args.out):
            print(done.line())
        return 0
    if not args.ops:
        raise AstraError("give at least one OP to extract, or --list")
    from astra_sglang.cli.output import console

    err = console(stderr=True)
    if args.add_trace is not None:
        from astra_sglang.extract import catalog
        from astra_sglang.extract.traces import add_trace

        for op in args.ops:
            entry = catalog.find(op)
            folder = args.out / (entry.short_name if entry else op)
            added = add_trace(folder, args.add_trace)
            err.print(f"{folder}: {added} traced shape(s) added")
        return 0
    from astra_sglang.extract.extractor import extract

    def progress(name: str, done) -> None:
        note = done.note()
        err.print(f"[green]extracted[/] {name} -> {done.path}" + (f" ({note})" if note else ""), highlight=False,
                  soft_wrap=True)

    extract(list(args.ops), args.out, progress=progress)
    return 0
