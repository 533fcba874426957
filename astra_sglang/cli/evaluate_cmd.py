"""``astra-sglang evaluate QUEUE``: the GPU-host side of ``optimize --eval-queue`` (no model, no agents SDK)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from astra_sglang.errors import AstraError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "evaluate", help="fill in the results of an optimizer's evaluation queue (run on the GPU host)",
        description="Evaluates every request in QUEUE that has no result yet with the local harness and writes "
                    "<item>/result.json; then `optimize --resume RUN` on the loop's host picks them up.")
    p.add_argument("queue", type=Path, help="the queue folder given to optimize --eval-queue")
    p.add_argument("--extracted", type=Path, default=Path("extracted"), help="extracted ops root on this host")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default=None, help="override the requests' device")
    p.add_argument("--watch", type=float, default=0.0, metavar="S",
                   help="keep polling the queue for this many seconds (default: one pass)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from rich.console import Console

    from astra_sglang.loop.evaluator import process_queue, queue_status

    console = Console()
    if not args.queue.is_dir():
        raise AstraError(f"{args.queue} is not a queue folder")
    deadline = time.monotonic() + args.watch
    total = 0
    while True:
        done = process_queue(args.queue, args.extracted, args.device,
                             progress=lambda r: console.print(f"evaluating {r.item_id} ({r.op}, {r.label})",
                                                              highlight=False))
        for item, result in done:
            verdict = "correct" if result.ok else "NOT correct"
            sp = f", geomean {result.geomean_speedup:.3f}x" if result.geomean_speedup is not None else ""
            console.print(f"  {item}: {verdict}{sp} on {result.device}", highlight=False)
        total += len(done)
        if time.monotonic() >= deadline:
            break
        time.sleep(2.0)
    status = queue_status(args.queue)
    console.print(f"evaluated {total}; queue: {status['done']} done, {status['pending']} pending", highlight=False)
    return 0
