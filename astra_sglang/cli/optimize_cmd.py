"""``astra-sglang optimize OP``: the multi-agent optimization loop (see astra_sglang/loop)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from astra_sglang.cli.args import at_most_16, fraction, non_negative_float, non_negative_int, positive_int
from astra_sglang.cli.model_args import add_model_arguments, model_options, model_overrides, retry_policy
from astra_sglang.errors import AstraError
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
    p.add_argument("--rounds", type=positive_int, default=None,
                   help="optimization rounds R, at least 1 (default 5; on resume: extend)")
    p.add_argument("--single-agent", action="store_true", help="one agent with the same tools does all four jobs")
    p.add_argument("--candidates", type=at_most_16, default=1, metavar="K",
                   help="K distinct directions a round: K plans, K coding agents at once, K candidates evaluated "
                        "together (default 1, the paper's loop; with --single-agent: K single agents)")
    p.add_argument("--patience", type=positive_int, default=None, metavar="N",
                   help="stop after N rounds without a gain in the best speedup")
    p.add_argument("--seed-kernel", type=Path, metavar="FILE",
                   help="round 1 evaluates this kernel instead of asking the model (an earlier run's winner, e.g. a "
                        "shipped patch's kernel.py), and the rounds after it go on from it if it is the best; it "
                        "counts as one of --rounds and is labelled as the seed wherever it appears")
    p.add_argument("--stop-at-bound-margin", type=fraction, default=None, metavar="M",
                   help="stop once the best runs within M (e.g. 0.03) of the copy bound on the timed shapes")
    add_model_arguments(p)
    p.add_argument("--max-fix-attempts", type=non_negative_int, default=3, help="build-error fix attempts per round (default 3)")
    p.add_argument("--shapes", default="paper", help="harness shape set timed and checked (default paper; test = tiny CPU suite)")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"],
                   help="where candidates are checked and timed: auto = the GPU if there is one; cpu = correctness "
                        "only (Triton ops, TRITON_INTERPRET=1, no timing, so no winner)")
    p.add_argument("--mode", default="cold", choices=["cold", "warm"], help="timing mode (default cold L2)")
    p.add_argument("--eval-queue", metavar="DIR", help="evaluate through a queue folder filled by `evaluate DIR` on a GPU host")
    p.add_argument("--eval-wait-s", type=non_negative_float, default=None,
                   help="wait this long for queue results before stopping (default 0)")
    p.add_argument("--ncu", action="store_true", help="give the Profiling agent Nsight Compute counters (GPU host)")
    p.add_argument("--label", help="a note shown in the log, tables and best/ (e.g. for scripted candidates)")
    p.add_argument("--no-live", action="store_true", help="plain progress lines instead of the live view")
    p.add_argument("--register-patch", action="store_true", help="hand the winner to the patch registry")
    p.add_argument("--patch-id", help="patch id for --register-patch (default: the run id)")
    p.add_argument("--json", action="store_true",
                   help="print the run's summary (status, exit code, rounds, winner) as JSON on stdout; progress "
                        "goes to stderr")
    p.set_defaults(handler=handle)


def refuse_taken_run_id(args: argparse.Namespace) -> None:
    """A new run under an existing --run-id is refused before anything runs: the model probe would otherwise
    create the file: provider's folder and take a request first."""
    if not args.run_id or args.resume or not args.op:
        return
    from astra_sglang.contract.op import find_op_dir, load_manifest
    from astra_sglang.loop.runfolder import RunFolder

    RunFolder.new_path(args.runs_dir, load_manifest(find_op_dir(args.op, args.extracted)).short_name, args.run_id)


def handle(args: argparse.Namespace) -> int:
    from astra_sglang.harness.parent.tune_space import tune_cap
    from astra_sglang.loop.session import OptimizeRequest, run_optimize

    refuse_taken_run_id(args)
    if args.seed_kernel is not None:
        if args.resume:
            raise AstraError("--seed-kernel starts a run; a resumed run keeps the seed it started with")
        if not args.seed_kernel.is_file():
            raise AstraError(f"--seed-kernel {args.seed_kernel}: no such file")
    model = model_options(args)
    options = LoopOptions(
        rounds=5 if args.rounds is None else args.rounds, single_agent=args.single_agent,
        max_fix_attempts=args.max_fix_attempts, max_turns=args.max_turns, model=model,
        retry=retry_policy(args),
        eval_queue=str(Path(args.eval_queue).resolve()) if args.eval_queue else None,
        eval_wait_s=args.eval_wait_s or 0.0,
        eval=EvalSpec(shapes=args.shapes, device=args.device, mode=args.mode,
                      harness={"max_tune_configs": tune_cap(args.candidates)} if args.candidates > 1 else {}),
        ncu=args.ncu, label=args.label,
        candidates=args.candidates, patience=args.patience, stop_at_bound_margin=args.stop_at_bound_margin,
        seed_kernel=str(args.seed_kernel.resolve()) if args.seed_kernel else None)
    overrides = {**model_overrides(args), "rounds": args.rounds, "eval_wait_s": args.eval_wait_s,
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
