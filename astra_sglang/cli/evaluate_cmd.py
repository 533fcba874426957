"""``astra-sglang evaluate QUEUE``: the GPU-host side of ``optimize --eval-queue`` (no model, no agents SDK)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from astra_sglang.cli.args import non_negative_float
from astra_sglang.contract.base import Model
from astra_sglang.contract.result import EvalResult
from astra_sglang.errors import AstraError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "evaluate", help="fill in the results of an optimizer's evaluation queue (run on the GPU host)",
        description="Evaluates every request in QUEUE that has no result yet with the local harness and writes "
                    "<item>/result.json; then `optimize --resume RUN` on the loop's host picks them up.")
    p.add_argument("queue", type=Path, help="the queue folder given to optimize --eval-queue")
    p.add_argument("--extracted", type=Path, default=Path("extracted"), help="extracted ops root on this host")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default=None, help="override the requests' device")
    p.add_argument("--watch", type=non_negative_float, default=0.0, metavar="S",
                   help="keep polling the queue for this many seconds (default 0: one pass)")
    p.add_argument("--jobs", choices=["all", "evaluate", "tune"], default="all",
                   help="which requests this pass takes: all (candidates first, then the originals' sweeps), only "
                        "candidates, or only the sweeps (a pass of its own for a sweep that outlasts the passes "
                        "left after candidates, e.g. decode_attention's 64 configs x 14 shapes)")
    p.add_argument("--json", action="store_true", help="print what was evaluated (item and EvalResult) as JSON")
    p.set_defaults(handler=handle)


class EvaluatedItem(Model):
    item: str
    result: EvalResult


class EvaluateReport(Model):
    """``evaluate --json``: what this call evaluated, and what the queue holds after it."""

    evaluated: list[EvaluatedItem]
    done: int
    pending: int


def _refuse_untimed(queue: Path, device: str | None) -> None:
    """A result written without a GPU has no timing, and a result is final: the run could never be timed."""
    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.harness import resolve_device
    from astra_sglang.loop.evaluator import list_queue

    if device is not None or resolve_device(EvalConfig(device="auto")) != "cpu":
        return
    timed = [r.item_id for _, r, result in list_queue(queue) if result is None and r.spec.device == "auto"]
    if timed:
        raise AstraError(f"no CUDA GPU visible: {len(timed)} request(s) in {queue} need timing ({timed[0]}, ...) and "
                         f"a result written here would have none; run `astra-sglang evaluate` on the GPU host, or "
                         f"pass --device cpu for correctness-only results")


def handle(args: argparse.Namespace) -> int:
    from astra_sglang.loop.evaluator import process_queue, queue_status
    from astra_sglang.loop.records import NOT_RETIMED, QueueRequest, TuneOutcome

    if not args.queue.is_dir():
        raise AstraError(f"{args.queue} is not a queue folder")
    _refuse_untimed(args.queue, args.device)
    log = sys.stderr if args.json else sys.stdout  # with --json, stdout carries only the report
    deadline = time.monotonic() + args.watch
    evaluated: list[EvaluatedItem] = []
    said = 0
    swept: list[str] = []  # "item: answer" of each sweep, said after the pass's evaluations, in the order they ran

    def tuned(request: QueueRequest, outcome: TuneOutcome) -> None:
        b = outcome.baseline
        what = (f"sweep baseline {b.geomean_speedup:.3f}x over the original on {b.device}"
                if b is not None and b.geomean_speedup is not None else f"no sweep baseline ({outcome.error})")
        swept.append(f"{request.item_id}: {what}")

    while True:
        done = process_queue(args.queue, args.extracted, args.device, jobs=args.jobs,
                             progress=lambda r: print(f"evaluating {r.item_id} ({r.op}, {r.label})", file=log),
                             on_retry=lambda r, why: print(f"  {r.item_id}: the judge failed on its own side, not a "
                                                           f"verdict; left pending for one more pass "
                                                           f"({why.splitlines()[0][:160]})", file=log),
                             on_tune=tuned)
        for item, result in done:
            retime = (result.error or "").startswith(NOT_RETIMED)
            verdict = "correct" if result.ok else f"{NOT_RETIMED} (its own times stand)" if retime else "NOT correct"
            sp = f", geomean {result.geomean_speedup:.3f}x" if result.geomean_speedup is not None else ""
            print(f"  {item}: {verdict}{sp} on {result.device}", file=log)
            evaluated.append(EvaluatedItem(item=item, result=result))
        for line in swept[said:]:
            print(f"  {line}", file=log)
        said = len(swept)
        if time.monotonic() >= deadline:
            break
        time.sleep(2.0)
    status = queue_status(args.queue)
    sweeps = f", swept {len(swept)} original(s)" if swept else ""
    print(f"evaluated {len(evaluated)}{sweeps}; queue: {status['done']} done, {status['pending']} pending", file=log)
    if args.json:
        print(EvaluateReport(evaluated=evaluated, **status).model_dump_json(indent=2))
    return 0
