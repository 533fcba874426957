"""``astra-sglang report RUN [RUN ...]``: one markdown page with tables and plots for finished runs."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report", help="write a markdown page (and PNGs beside it) about optimizer runs",
        description="Per run: op, label as recorded, model, mode, rounds, wall time and tokens per step, best speedup "
                    "per round. Per winner: original / sweep baseline / best / copy bound per shape, speedup and % of "
                    "the copy bound. Plots: best speedup so far per round (one line per run), the winner per shape.")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run folder, or run id under --runs-dir")
    p.add_argument("--runs-dir", type=Path, default=Path("runs"), help="runs root for run ids (default: runs)")
    p.add_argument("--out", type=Path, default=None,
                   help="the markdown page; PNGs are written beside it (default: RUN/report.md for one run; for "
                        "several, report.md in the folder holding them all, e.g. runs/<op>/report.md)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from astra_sglang.errors import AstraError
    from astra_sglang.loop.report import NO_FINISHED_ROUND, default_out, load_run, write_report

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise AstraError("report needs matplotlib (pip install 'astra-sglang[agents]')") from None
    # Several runs: one still in its first round is listed as such, not a reason to report none of them.
    many = len(args.runs) > 1
    runs = [load_run(Path(r), args.runs_dir, allow_unfinished=many) for r in args.runs]
    if not any(r.records for r in runs):
        raise AstraError(f"none of the {len(runs)} runs has a finished round (nothing to report)")
    for run in runs:
        if not run.records:
            print(f"{run.folder.path}: {NO_FINISHED_ROUND} (listed as such on the page)")
    out = args.out or default_out(runs)
    try:
        page, pngs = write_report(runs, out)
    except OSError as e:
        raise AstraError(f"cannot write the report {out}: {e.strerror or e} (choose another --out)") from None
    print(f"report: {page}")
    for png in pngs:
        print(f"plot: {png}")
    return 0
