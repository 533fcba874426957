"""``astra-sglang e2e -- <one_batch / launch_server arguments>``: does the model forward get faster with the patches?

SGLang's own model forward (``sglang.benchmark.one_batch`` after ``load_plugins()``, run as
``python -m astra_sglang.profile.one_batch_child``) in fresh processes, rounds of A (patches off) B (on) C
(placebo: B's hooks, SGLang's originals serving), rotated. One A/B pair cannot answer: processes with identical
kernels differ by 1-4% (CV of the decode step median, by batch size) on the H200.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from astra_sglang.cli.args import at_least_two, non_negative_int, positive_float, positive_int
from astra_sglang.errors import AstraError

if TYPE_CHECKING:
    from astra_sglang.e2e.forecast import Forecasts
    from astra_sglang.profile.coverage import ForwardRows


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "e2e", help="A/B/placebo of SGLang's model forward (one_batch) in fresh processes, with intervals",
        description="Runs the forward once per arm per round in a fresh process: A patches off, B patches on, C "
                    "placebo (the same hooks, SGLang's originals serve every call), in an order rotated each round. "
                    "Reports, per batch size, decode step median and prefill latency, B/A and C/A with bootstrap "
                    "95% intervals over processes, and calls served per patch. A gain only if B/A's interval "
                    "excludes 1, C/A's holds 1 and every patch this forward reaches served calls (one whose op is never "
                    "called is listed as not reached). Warm-up processes run first, outside the statistics. "
                    "Everything after `--` goes to "
                    "sglang.benchmark.one_batch (the launch_server arguments, e.g. --model-path M --load-format dummy).")
    p.add_argument("--rounds", type=at_least_two, default=6, help="rounds always run (each: one process per arm)")
    p.add_argument("--max-rounds", type=at_least_two, default=None,
                   help="go on past --rounds up to this many while a decode B/A interval is wider than "
                        "--target-halfwidth (default: twice --rounds)")
    p.add_argument("--target-halfwidth", type=positive_float, default=0.01,
                   help="stop once every decode B/A interval's half-width is below this (0.01 = +-1%%)")
    p.add_argument("--patches", default="all", help="arm B's ASTRA_SGLANG_PATCHES: 'all' or id1,id2")
    p.add_argument("--batch-size", type=positive_int, nargs="+", help="one_batch --batch-size (default: its own, 1)")
    p.add_argument("--input-len", type=positive_int, nargs="+", help="one_batch --input-len")
    p.add_argument("--output-len", type=positive_int, nargs="+", help="one_batch --output-len")
    p.add_argument("--out", type=Path, help="run folder; an existing one of the same measurement is resumed "
                                            "(default: runs/e2e-<date-time>)")
    p.add_argument("--warmup-processes", type=non_negative_int, default=1,
                   help="processes of arm A's command before round 1, kept under r000/ but never in the statistics: "
                        "the first process on a machine compiles Triton/JIT kernels inside its measured steps; a "
                        "resumed run does not repeat finished ones")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: recompute report.json and the plot from the finished processes in --out "
                        "(a run cut by a time limit) and print them; the one_batch arguments are not needed")
    p.add_argument("--timeout", type=positive_float, default=3600.0, help="seconds one process may run")
    p.add_argument("--seed", type=int, default=0, help="the bootstrap's seed")
    p.add_argument("--forward", nargs="+", metavar="CMD",
                   help="the process to run instead of SGLang's forward: a .py script (run with this Python) or a "
                        "command; it gets the one_batch arguments and --result-filename F (tests use a stand-in)")
    p.add_argument("--in-process", action="store_true",
                   help="all arms in ONE process of the forward, switched by recapturing the decode CUDA graphs "
                        "before each arm-run (A and C: the patches disabled, hooks in place; B: serving): no "
                        "process-to-process noise, so +-1%% takes minutes, not ~70 rounds. It cannot see the "
                        "hooks' own cost (A has them too): the cross-process run measures that. Runs exactly "
                        "--rounds rounds")
    p.add_argument("--prefill-chunk-tokens", type=positive_int, default=None, metavar="N",
                   help="prefill the batch in groups of requests of at most N tokens, merged into "
                        "one decode batch as SGLang's scheduler merges prefilled requests, instead of one_batch's "
                        "one forward over the whole batch, whose activations do not fit beside a long-context KV "
                        "pool (batch 32 at 8k tokens on an 80 GB card). The decode step is the full batch's; the "
                        "prefill latency is the groups' sum")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("one_batch_args", nargs=argparse.REMAINDER, metavar="ONE_BATCH_ARGS",
                   help="after `--`: sglang.benchmark.one_batch arguments, passed unchanged")
    p.set_defaults(handler=cmd_e2e)


def one_batch_args(args: argparse.Namespace) -> list[str]:
    """The arguments after ``--``, with e2e's own --batch-size/--input-len/--output-len put in (given twice is
    an error: which one meant the user?)."""
    rest = list(args.one_batch_args)
    if rest and rest[0] == "--":
        rest = rest[1:]
    for flag, values in (("--batch-size", args.batch_size), ("--input-len", args.input_len),
                         ("--output-len", args.output_len)):
        if values is None:
            continue
        if any(a == flag or a.startswith(flag + "=") for a in rest):
            raise AstraError(f"{flag} given both before and after `--`; give it once")
        rest += [flag, *map(str, values)]
    return rest


def cmd_e2e(args: argparse.Namespace) -> int:
    try:
        import numpy  # noqa: F401
    except ImportError:
        raise AstraError("e2e's statistics need numpy (SGLang's environment has it): pip install numpy") from None
    from astra_sglang.e2e.runner import PLOT_FILE, E2EConfig, preflight, run

    if args.report_only:
        if args.out is None:
            raise AstraError("--report-only needs --out: the run folder to report on")
        report = _report_only(args.out)
        show(report, args.out / PLOT_FILE, args.json)
        return 0
    ob_args = one_batch_args(args)
    from astra_sglang.profile.runner import check_prefill_grouping

    check_prefill_grouping(ob_args, args.prefill_chunk_tokens or 0)
    forward = preflight(args.forward, ob_args, args.in_process)
    max_rounds = args.max_rounds if args.max_rounds is not None else 2 * args.rounds
    if max_rounds < args.rounds:
        raise AstraError(f"--max-rounds {max_rounds} is below --rounds {args.rounds}")
    cfg = E2EConfig(forward=forward, one_batch_args=ob_args, patches=args.patches, rounds=args.rounds,
                    max_rounds=max_rounds, target_halfwidth=args.target_halfwidth, timeout_s=args.timeout,
                    seed=args.seed, warmup_processes=0 if args.in_process else args.warmup_processes,
                    in_process=args.in_process, prefill_chunk_tokens=args.prefill_chunk_tokens or 0)
    out = args.out if args.out is not None else Path("runs") / f"e2e-{time.strftime('%Y%m%d-%H%M%S')}"
    say = lambda msg: print(f"e2e: {msg}", file=sys.stderr, flush=True)  # noqa: E731
    from astra_sglang.profile.coverage import forward_rows, idle_patch_lines

    found = forward_rows(ob_args, args.patches)
    for line in idle_patch_lines(found):
        say(f"warning: {line}")
    forecasts = _forecasts(found, say)
    if args.in_process:
        from astra_sglang.e2e.inprocess import run_in_process

        report = run_in_process(cfg, out, progress=say, forecasts=forecasts)
    else:
        report = run(cfg, out, progress=say, forecasts=forecasts)
    show(report, out / PLOT_FILE, args.json)
    return 0


def _forecasts(found: ForwardRows | None, say: Callable[[str], None]) -> Forecasts | None:
    """The decode step time the serving patches' records say each batch size should lose on this GPU
    (e2e/forecast.py), said before the run; the run folder keeps them for the report."""
    from astra_sglang.e2e.forecast import Forecasts, shape_label
    from astra_sglang.profile.coverage import forward_savings

    saved = forward_savings(found)
    if saved is None:
        return None
    gpu, steps = saved
    for s in steps:
        say(f"forecast: {shape_label(s.batch_size, s.input_len, s.output_len)}: {s.saved_us:,.0f} us a decode step "
            f"from the kernel records on {gpu}"
            + "".join(f"; {p}" for p in s.parts + [f"not counted: {u}" for u in s.uncounted]))
    return Forecasts(gpu=gpu, steps=steps)


def _report_only(out: Path) -> object:
    from astra_sglang.e2e.runner import CONFIG_FILE, read_config, report_only

    if (out / CONFIG_FILE).is_file() and read_config(out / CONFIG_FILE).in_process:
        from astra_sglang.e2e.inprocess import report_in_process

        return report_in_process(out)
    return report_only(out)


def show(report: object, png_path: Path, as_json: bool) -> None:
    """Draw the plot (when matplotlib is here) and print the report: a run's and --report-only's alike."""
    from astra_sglang.e2e.plot import plot_report
    from astra_sglang.e2e.runner import E2EReport

    assert isinstance(report, E2EReport)
    png = plot_report(report, png_path)
    if as_json:
        print(report.model_dump_json(indent=2))
    else:
        print_report(report, png)


def print_report(report: object, png: Path | None) -> None:
    from astra_sglang.cli.output import Table, console, literal
    from astra_sglang.e2e.runner import E2EReport

    assert isinstance(report, E2EReport)
    con = console()
    inproc = report.config.in_process
    over = "arm-runs in one process (graphs recaptured per arm-run)" if inproc else "processes"
    arm_cols = ("A disabled", "B on", "C placebo (= A)") if inproc else ("A off", "B on", "C placebo")
    for metric in ("decode", "prefill"):
        t = Table(title=f"{'decode step median' if metric == 'decode' else 'prefill latency'} (ms), "
                        f"{report.rounds_done} rounds; ratios with 95% bootstrap intervals over {over}")
        for col in ("bs", "in", "out", *arm_cols, "B/A", "C/A", "verdict"):
            t.add_column(col)
        for s in report.shapes:
            m = getattr(s, metric)
            ms = [f"{m.medians[a] * 1e3:.3f}" if a in m.medians else "-" for a in ("A", "B", "C")]
            t.add_row(str(s.batch_size), str(s.input_len), str(s.output_len), *ms,
                      m.b_over_a.text() if m.b_over_a else "-", m.c_over_a.text() if m.c_over_a else "-", m.verdict)
        con.print(t)
    t = Table(title="calls per patch (" + ("counted around each arm-run, graph capture included)" if inproc
                                           else "from the processes' status records)"))
    stacked = any(row.passed_on for row in report.patch_calls)  # a rewrite with a retune behind it
    for col in ("patch", "arm", report.config.sample_unit, "served by patch", "served by original",
                *(("passed on",) if stacked else ()), "states"):
        t.add_column(col)
    for row in report.patch_calls:
        t.add_row(row.patch_id, row.arm, str(row.processes), str(row.served_by_patch), str(row.served_by_original),
                  *((str(row.passed_on),) if stacked else ()), literal("; ".join(row.states)))
    con.print(t)
    con.print(f"verdict: {report.verdict}", markup=False)
    for line in report.reasons:
        con.print(f"  {line}", markup=False)
    for line in report.problems[:10]:
        con.print(f"  problem: {line}", markup=False)
    for line in report.shadowed:
        con.print(f"  stacked: {line}", markup=False)
    if report.config.prefill_chunk_tokens:
        con.print(f"prefill: in groups of requests of at most {report.config.prefill_chunk_tokens} tokens, merged "
                  "into one decode batch (--prefill-chunk-tokens); prefill latency is the groups' sum", markup=False)
    if inproc:
        con.print("in-process: A and C ran SGLang's originals through the installed hooks, B the patches; the hooks' "
                  "own cost is not in B/A (the cross-process e2e measures it)", markup=False)
    else:
        con.print(f"warm-up processes: {report.warmup_processes} (arm A's command before round 1, under r000/; "
                  "not in the statistics)", markup=False)
    if report.halfwidth is not None:
        need = f"; about {report.rounds_needed} rounds would reach +-{report.config.target_halfwidth:g}" \
            if report.rounds_needed and report.halfwidth > report.config.target_halfwidth else ""
        con.print(f"widest decode B/A half-width {report.halfwidth:.4f}{need}", markup=False)
    for f in report.forecast:
        con.print(f"forecast: {f.text()}", markup=False)
    for line in report.gpu_findings:  # why processes differ: were the slow ones on lower clocks?
        con.print(f"gpu: {line}", markup=False)
    con.print(f"stopped: {report.stopped}", markup=False)
    con.print(f"report: {Path(report.out) / 'report.json'}; "
              + (f"plot: {png}" if png else "no plot (matplotlib is not installed)"), markup=False)
