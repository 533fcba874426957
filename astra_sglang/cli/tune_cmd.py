"""``astra-sglang tune OP``: sweep the original's own launch parameters; the sweep baseline a candidate must beat."""

from __future__ import annotations

import argparse
from pathlib import Path

from astra_sglang.cli.args import positive_float
from astra_sglang.contract.op import find_op_dir
from astra_sglang.errors import AstraError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "tune", help="sweep the original kernel's own launch parameters (num_warps, block sizes) per shape",
        description="Finds the launch parameters OP's original Triton wrapper passes (num_warps, num_stages, "
                    "block-size constexprs), checks and times every combination against the original in one "
                    "isolated worker, and writes the per-shape best (the sweep baseline) to "
                    "<op folder>/tune_baseline.json or --out.")
    p.add_argument("op", metavar="OP", help="extracted op short name (extracted/<OP>) or a folder path")
    p.add_argument("--out", type=Path, help="where to write the baseline (default: <op folder>/tune_baseline.json)")
    p.add_argument("--shapes", choices=["paper", "decode", "prefill", "all", "test"], default="paper",
                   help="shapes to time; 'test' = tiny shapes for CPU runs")
    p.add_argument("--dtype", action="append", dest="dtypes", metavar="DTYPE", help="dtype to time (default bfloat16)")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                   help="cpu = under TRITON_INTERPRET=1: checks only, the choice is not a measurement")
    p.add_argument("--timeout", type=positive_float, default=120.0, help="seconds without progress before a worker is killed")
    p.add_argument("--seed", type=int, help="base seed of the quick cases (default: fresh)")
    p.add_argument("--extracted", type=Path, default=Path("extracted"), help="extracted ops root (default: extracted/)")
    p.add_argument("--json", action="store_true", help="print the baseline as JSON")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from astra_sglang.contract.base import write_atomic
    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.harness.evaluate import resolve_device
    from astra_sglang.harness.tune_baseline import BASELINE_NAME, sweep_baseline

    op_dir = find_op_dir(args.op, args.extracted)
    config = EvalConfig(shapes=args.shapes, dtypes=args.dtypes, timing_dtypes=args.dtypes, device=args.device,
                        timeout_s=args.timeout, seed=args.seed)
    if args.device == "cpu":  # host timers mean nothing: run the timing path briefly, as the CPU tests do
        config = config.model_copy(update=dict(simulate_timing=True, warmup=1, rep=4, max_graph_launches=3))
    if args.device == "auto" and resolve_device(config) == "cpu":
        raise AstraError("no CUDA GPU visible: tuning needs one to time. To check the configs only (Triton ops, "
                         "under TRITON_INTERPRET=1) pass --device cpu, with --shapes test to keep it fast")
    baseline = sweep_baseline(op_dir, config)
    out = args.out or op_dir / BASELINE_NAME
    write_atomic(out, baseline.model_dump_json(indent=1) + "\n")
    if args.json:
        print(baseline.model_dump_json(indent=2))
        return 0
    print(f"{baseline.op_id} on {baseline.device}: swept "
          + "; ".join(f"{k} in {v} (original: {baseline.original_config[k]})" for k, v in baseline.parameters.items()))
    dropped = [c for c in baseline.configs if not c.ok]
    print(f"{len(baseline.configs)} configs, {len(dropped)} dropped by the checks"
          + (f" (first: {dropped[0].config}: {(dropped[0].failure or '')[:120]})" if dropped else ""))
    if baseline.shapes:
        print(f"{'shape':<28} {'original us':>12} {'best us':>10} {'speedup':>8}  best config")
        for s in baseline.shapes:
            dims = "x".join(str(v) for v in s.dims.values())
            print(f"{dims + ' ' + s.dtype:<28} {s.original_us:>12.2f} {s.best_us:>10.2f} {s.speedup:>7.3f}x  "
                  + ", ".join(f"{k.rpartition('.')[2]}={v}" for k, v in s.best_config.items()))
        geo = baseline.geomean_speedup
        print(f"sweep baseline geomean over the original: {geo:.3f}x" if geo else "")
    if baseline.note:
        print(baseline.note)
    print(f"wrote {out}")
    return 0
