"""``astra-sglang bench OP``: check and time an extracted op, or a candidate against it, on this machine."""

from __future__ import annotations

import argparse
from pathlib import Path

from astra_sglang.cli.args import existing_file, positive_float
from astra_sglang.contract.op import find_op_dir
from astra_sglang.errors import AstraError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench", help="check and time an extracted kernel (or a candidate against it)",
        description="Builds, checks and times OP (a folder under --extracted, or a path) and, with --candidate, "
                    "a replacement source against it, each in an isolated worker process.")
    p.add_argument("op", metavar="OP", help="extracted op short name (extracted/<OP>) or a folder path")
    p.add_argument("--candidate", type=existing_file, help=".cuh (CUDA ops) or .py (Triton ops) replacing the kernel source")
    p.add_argument("--shapes", choices=["paper", "decode", "prefill", "all", "test"], default="paper",
                   help="shapes to time (and check); 'test' = tiny shapes for CPU runs")
    p.add_argument("--dtype", action="append", dest="dtypes", metavar="DTYPE",
                   help="dtype to check and time (repeatable; default: check all, time bfloat16)")
    p.add_argument("--warm", action="store_true", help="warm-L2 timing (default: cold, inputs rotated over > 4x L2)")
    p.add_argument("--paper-protocol", action="store_true", help="20 warm-up / 100 timed replays (Astra paper)")
    p.add_argument("--heldout", action="store_true", help="include the private held-out cases (final verdict)")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                   help="cpu = correctness only under TRITON_INTERPRET=1 (Triton ops)")
    p.add_argument("--timeout", type=positive_float, default=120.0, help="seconds without progress before a worker is killed")
    p.add_argument("--seed", type=int, help="base seed of the visible cases (default: fresh)")
    p.add_argument("--extracted", type=Path, default=Path("extracted"), help="extracted ops root (default: extracted/)")
    p.add_argument("--json", action="store_true", help="print the EvalResult as JSON")
    p.set_defaults(handler=handle)



def handle(args: argparse.Namespace) -> int:
    from astra_sglang.cli.output import HAVE_RICH, console
    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.contract.op import ManifestError, load_manifest
    from astra_sglang.harness import evaluate, resolve_device
    from astra_sglang.loop.static_check import require_candidate_file

    if not args.json and not HAVE_RICH:
        raise AstraError("bench's report needs rich (`pip install 'astra-sglang[gpu]'`); or pass --json")
    op_dir = find_op_dir(args.op, args.extracted)
    if args.candidate is not None:
        try:
            require_candidate_file(args.candidate, load_manifest(op_dir))
        except ManifestError as e:
            raise AstraError(str(e)) from None
        from astra_sglang.harness.parent.sweep import declared_space

        declared_space(args.candidate)  # a malformed TUNE is the user's input error: one line, before any work
    config = EvalConfig(shapes=args.shapes, dtypes=args.dtypes, timing_dtypes=args.dtypes,
                        mode="warm" if args.warm else "cold", protocol="paper" if args.paper_protocol else "default",
                        include_heldout=args.heldout, device=args.device, timeout_s=args.timeout, seed=args.seed)
    if args.device == "auto" and resolve_device(config) == "cpu":
        raise AstraError("no CUDA GPU visible: timing needs one. For correctness only (Triton ops, under "
                         "TRITON_INTERPRET=1) pass --device cpu, with --shapes test to keep it fast")
    result = evaluate(op_dir, args.candidate, config)
    if args.json:
        print(result.model_dump_json(indent=2))
    else:
        from astra_sglang.harness import print_result

        print_result(result, console(width=160))  # the per-shape table has 12 columns
    if args.candidate is None:
        return 0 if result.build.ok and result.error is None else 1
    return 0 if result.ok else 1
