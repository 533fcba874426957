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
    p.add_argument("--out", type=Path, default=Path("astra-report.md"),
                   help="the markdown page; PNGs are written beside it (default: astra-report.md)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from astra_sglang.errors import AstraError
    from astra_sglang.loop.report import load_run, write_report

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise AstraError("report needs matplotlib (pip install 'astra-sglang[agents]')") from None
    runs = [load_run(Path(r), args.runs_dir) for r in args.runs]
    page, pngs = write_report(runs, args.out)
    print(f"report: {page}")
    for png in pngs:
        print(f"plot: {png}")
    return 0
