"""``astra-sglang extract``: list SGLang's kernels, extract some into folders, add traced shapes to one."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from astra_sglang.cli.args import at_least_one
from astra_sglang.cli.model_args import add_model_arguments, model_options, retry_policy
from astra_sglang.errors import AstraError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "extract",
        help="pull SGLang kernels into stand-alone folders",
        description="Extract SGLang kernels (op id, 'module:attr', or an unambiguous short name) into OUT/<name>/.",
    )
    p.add_argument("ops", nargs="*", metavar="OP",
                   help="kernels to extract: op id, 'module:attr' or short name (see --list)")
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
    d = p.add_argument_group(
        "drafting", "--draft: a Contract agent drafts the contract of an op without a catalog entry from SGLang's "
        "own sources; the folder is written only once the original kernel agrees with the draft (docs/extract.md)")
    d.add_argument("--draft", action="store_true", help="draft OP's contract with a model, validate it, write it")
    d.add_argument("--draft-attempts", type=at_least_one, default=3,
                   help="drafts the agent may make before giving up (default 3)")
    d.add_argument("--drafts-dir", type=Path, default=Path("runs") / "drafts",
                   help="where each session's drafts and transcript are logged (default runs/drafts)")
    d.add_argument("--resume", type=Path, metavar="LOG_DIR",
                   help="continue a drafting session: its recorded model calls are replayed, not repeated")
    d.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                   help="where the original is validated (auto: the GPU if there is one)")
    add_model_arguments(d)
    p.set_defaults(handler=run)


def _draft(args: argparse.Namespace) -> int:
    from astra_sglang.extract.discovery import check_names

    if len(args.ops) != 1:
        raise AstraError("--draft takes exactly one OP")
    check_names(args.ops)
    model = model_options(args)
    if model.kind == "openai":
        from astra_sglang.agents.models import _api_key

        _api_key(model)  # a missing key: one line now, not after SGLang's import and registry scan
    from astra_sglang.agents.drafting import DraftRequest, draft_op
    from astra_sglang.cli.output import console

    err = console(stderr=True)
    req = DraftRequest(op=args.ops[0], out=args.out, model=model, retry=retry_policy(args),
                       attempts=args.draft_attempts, max_turns=args.max_turns, drafts_dir=args.drafts_dir,
                       resume=args.resume, device=args.device)
    done = draft_op(req, progress=lambda line: err.print(line, highlight=False, soft_wrap=True, markup=False))
    if done.status == "pending_gpu":
        err.print(f"[yellow]drafted[/] {done.folder.name} -> {done.folder} after {done.attempts} attempt(s): built "
                  f"with nvcc; GPU validation pending: `optimize` refuses it until `astra-sglang validate-contract "
                  f"{done.folder.name}` passes on a GPU host", highlight=False, soft_wrap=True)
    else:
        v = done.validation
        err.print(f"[green]drafted[/] {done.folder.name} -> {done.folder} after {done.attempts} attempt(s), "
                  f"validated: {v.cases_run if v else 0} cases on {v.device if v else '?'} (log {done.log})",
                  highlight=False, soft_wrap=True)
    return 0


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


def _check_arguments(args: argparse.Namespace) -> None:
    """Mistakes in the command line itself, refused before anything slow (SGLang's import, the registry scan)."""
    listing = [f for f, on in (("--json", args.json), ("--extractable", args.extractable),
                               ("--check-load", args.check_load)) if on]
    if listing:
        raise AstraError(f"{', '.join(listing)}: option(s) of --list, given without it")
    if args.out.exists() and not args.out.is_dir():
        raise AstraError(f"--out {args.out} is a file, not a folder")


def run(args: argparse.Namespace) -> int:
    if args.list:
        return _list(args.json, args.extractable, args.check_load)
    _check_arguments(args)
    if args.restore:
        from astra_sglang.extract.restore import restore_all

        for done in restore_all(args.out):
            print(done.line())
        return 0
    if not args.ops:
        raise AstraError("give at least one OP to extract, or --list")
    if args.draft:
        return _draft(args)
    if args.resume is not None:
        raise AstraError("--resume continues a drafting session: use it with --draft")
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
    from astra_sglang.extract.discovery import check_names
    from astra_sglang.extract.extractor import extract

    check_names(list(args.ops))  # a typo: one line now, not after SGLang's import and registry scan

    def progress(name: str, done) -> None:
        note = done.note()
        err.print(f"[green]extracted[/] {name} -> {done.path}" + (f" ({note})" if note else ""), highlight=False,
                  soft_wrap=True)

    extract(list(args.ops), args.out, progress=progress)
    return 0
