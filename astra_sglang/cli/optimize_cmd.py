"""``astra-sglang optimize OP``: the multi-agent optimization loop (see astra_sglang/loop)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from astra_sglang.agents.config import ModelOptions, RetryPolicy
from astra_sglang.cli.args import (
    at_least_two,
    at_most_16,
    fraction,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from astra_sglang.loop.records import EvalSpec, LoopOptions


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "optimize", help="optimize an extracted kernel with the multi-agent loop",
        description="Astra's loop: a Testing, Profiling, Planning and Coding agent rewrite the kernel for R rounds; "
                    "the harness builds, checks and times every candidate; the best correct one, confirmed on "
                    "held-out shapes, goes to runs/<op>/<run-id>/best/. Exit 0 = some round produced a correct "
                    "candidate, 1 = none did, 2 = bad input, 3 = waiting for --eval-queue results.")
    p.add_argument("op", nargs="?", help="op short name under --extracted, or an op folder")
    p.add_argument("--extracted", type=Path, default=Path("extracted"), help="extracted ops root (default: extracted)")
    p.add_argument("--runs-dir", type=Path, default=Path("runs"), help="runs root (default: runs)")
    p.add_argument("--run-id", help="name of the new run folder (default: timestamp)")
    p.add_argument("--resume", metavar="RUN", help="continue a run (its folder or run id) without repeating finished steps")
    p.add_argument("--rounds", type=non_negative_int, default=None, help="optimization rounds R (default 5; on resume: extend)")
    p.add_argument("--single-agent", action="store_true", help="one agent with the same tools does all four jobs")
    p.add_argument("--candidates", type=at_most_16, default=1, metavar="K",
                   help="K distinct directions a round: K plans, K coding agents at once, K candidates evaluated "
                        "together (default 1, the paper's loop; with --single-agent: K single agents)")
    p.add_argument("--patience", type=positive_int, default=None, metavar="N",
                   help="stop after N rounds without a gain in the best speedup")
    p.add_argument("--stop-at-bound-margin", type=fraction, default=None, metavar="M",
                   help="stop once the best runs within M (e.g. 0.03) of the copy bound on the timed shapes")
    p.add_argument("--model", default=None,
                   help="model name on an OpenAI-compatible server (default o4-mini), litellm/PROVIDER/NAME, or file:DIR")
    p.add_argument("--base-url", default=None, help="OpenAI-compatible server URL (e.g. http://127.0.0.1:30000/v1)")
    p.add_argument("--api-key-env", default=None, help="environment variable holding the API key (default OPENAI_API_KEY)")
    p.add_argument("--request-timeout-s", type=positive_float, default=None, help="per model request (default 600)")
    p.add_argument("--file-timeout-s", type=positive_float, default=None, help="file: provider wait per request (default 3600)")
    p.add_argument("--retries", type=non_negative_int, default=3, help="retries of a failed model request (default 3)")
    p.add_argument("--retry-backoff-s", type=non_negative_float, default=2.0, help="first retry delay, doubling (default 2)")
    p.add_argument("--max-fix-attempts", type=non_negative_int, default=3, help="build-error fix attempts per round (default 3)")
    p.add_argument("--max-turns", type=at_least_two, default=12, help="agent turns (model calls) per step (default 12)")
    p.add_argument("--shapes", default="paper", help="harness shape set timed and checked (default paper; test = tiny CPU suite)")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--mode", default="cold", choices=["cold", "warm"], help="timing mode (default cold L2)")
    p.add_argument("--eval-queue", metavar="DIR", help="evaluate through a queue folder filled by `evaluate DIR` on a GPU host")
    p.add_argument("--eval-wait-s", type=non_negative_float, default=None,
                   help="wait this long for queue results before stopping (default 0)")
    p.add_argument("--ncu", action="store_true", help="give the Profiling agent Nsight Compute counters (GPU host)")
    p.add_argument("--trace", action="store_true", help="enable openai-agents tracing (off by default)")
    p.add_argument("--label", help="a note shown in the log, tables and best/ (e.g. for scripted candidates)")
    p.add_argument("--no-live", action="store_true", help="plain progress lines instead of the live view")
    p.add_argument("--register-patch", action="store_true", help="hand the winner to the patch registry")
    p.add_argument("--patch-id", help="patch id for --register-patch (default: the run id)")
    p.add_argument("--json", action="store_true",
                   help="print the run's summary (status, exit code, rounds, winner) as JSON on stdout; progress "
                        "goes to stderr")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from astra_sglang.loop.session import OptimizeRequest, run_optimize

    model = ModelOptions(
        **{k: v for k, v in {"model": args.model, "base_url": args.base_url, "api_key_env": args.api_key_env,
                             "request_timeout_s": args.request_timeout_s, "file_timeout_s": args.file_timeout_s,
                             "trace": args.trace or None}.items() if v is not None})
    options = LoopOptions(
        rounds=5 if args.rounds is None else args.rounds, single_agent=args.single_agent,
        max_fix_attempts=args.max_fix_attempts, max_turns=args.max_turns, model=model,
        retry=RetryPolicy(retries=args.retries, backoff_s=args.retry_backoff_s),
        eval_queue=str(Path(args.eval_queue).resolve()) if args.eval_queue else None,
        eval_wait_s=args.eval_wait_s or 0.0,
        eval=EvalSpec(shapes=args.shapes, device=args.device, mode=args.mode), ncu=args.ncu, label=args.label,
        candidates=args.candidates, patience=args.patience, stop_at_bound_margin=args.stop_at_bound_margin)
    overrides = {"model": args.model, "base_url": args.base_url, "api_key_env": args.api_key_env,
                 "request_timeout_s": args.request_timeout_s, "file_timeout_s": args.file_timeout_s,
                 "trace": True if args.trace else None, "rounds": args.rounds, "eval_wait_s": args.eval_wait_s,
                 "patience": args.patience, "stop_at_bound_margin": args.stop_at_bound_margin}
    req = OptimizeRequest(op=args.op, options=options, extracted=args.extracted, runs_dir=args.runs_dir,
                          run_id=args.run_id, resume=args.resume, overrides=overrides,
                          live=False if args.no_live else None, json=args.json)
    summary = run_optimize(req)
    if args.register_patch and summary.status == "done":
        if summary.winner is None or summary.winner.round is None:
            print("no winner: nothing to register as a patch", file=sys.stderr)
        else:
            from astra_sglang.patches.tooling.add import add_from_run

            path = add_from_run(Path(summary.run_dir), patch_id=args.patch_id)
            print(f"registered patch: {path}", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(summary.model_dump_json(indent=2))
    return summary.exit_code
