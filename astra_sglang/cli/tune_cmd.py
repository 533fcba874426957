"""``astra-sglang tune OP``: sweep the original's own launch parameters; the sweep baseline a candidate must beat."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from astra_sglang.cli.args import positive_float, positive_int
from astra_sglang.contract.eval_config import EvalConfig
from astra_sglang.contract.op import canonical_op_id, find_op_dir
from astra_sglang.contract.result import SweepBaseline
from astra_sglang.errors import AstraError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "tune", help="sweep the original kernel's own launch parameters (num_warps, block sizes) per shape",
        description="Finds the launch parameters OP's original Triton wrapper passes (num_warps, num_stages, "
                    "block-size constexprs), checks and times every combination against the original in one "
                    "isolated worker, and writes the per-shape best (the sweep baseline) to "
                    "<op folder>/tune_baseline.json or --out. Without a GPU (--device cpu) it only checks every "
                    "config under the Triton interpreter on the test shapes and writes nothing: timing needs a GPU.")
    p.add_argument("op", metavar="OP", help="extracted op short name (extracted/<OP>) or a folder path")
    p.add_argument("--out", type=Path, help="where to write the baseline (default: <op folder>/tune_baseline.json)")
    p.add_argument("--shapes", choices=["paper", "decode", "prefill", "all", "test"],
                   help="shapes to time (default: paper); --device cpu checks the test shapes only")
    p.add_argument("--dtype", action="append", dest="dtypes", metavar="DTYPE", help="dtype to time (default bfloat16)")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                   help="cpu = under TRITON_INTERPRET=1: a correctness-only check of every config, nothing "
                        "timed or written")
    p.add_argument("--timeout", type=positive_float, default=120.0, help="seconds without progress before a worker is killed")
    p.add_argument("--seed", type=int, help="base seed of the quick cases (default: fresh)")
    p.add_argument("--extracted", type=Path, default=Path("extracted"), help="extracted ops root (default: extracted/)")
    p.add_argument("--json", action="store_true", help="print the baseline as JSON")
    p.add_argument("--prior", type=Path, metavar="SWEEP",
                   help="an earlier sweep of this op (its tune_baseline.json): time only the configs among each of "
                        "its shapes' --top fastest, e.g. after a contract revision moved the shapes a little. Written "
                        "to <op folder>/tune_baseline.prior.json by default; a retune can be registered from it, it "
                        "is never a loop run's bar (that is the whole space)")
    p.add_argument("--top", type=positive_int, default=3, help="with --prior: configs kept per prior shape (default 3)")
    p.add_argument("--chunk", type=positive_int, default=None,
                   help="configs per judge worker (default 16); each finished chunk is kept in <out>.partial.json "
                        "and a cut tune of the same sweep resumes from it")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from astra_sglang import platform_info
    from astra_sglang.contract.base import write_atomic
    from astra_sglang.harness import resolve_device, sweep_baseline
    from astra_sglang.harness.parent.tune_baseline import BASELINE_NAME, CHUNK, PRIOR_NAME, partial_path

    op_dir = find_op_dir(args.op, args.extracted)
    prior = (_read_prior(args.prior), args.top) if args.prior else None
    config = EvalConfig(shapes=args.shapes or "paper", dtypes=args.dtypes, timing_dtypes=args.dtypes,
                        device=args.device, timeout_s=args.timeout, seed=args.seed)
    if args.device == "auto" and resolve_device(config) == "cpu":
        raise AstraError("no CUDA GPU visible: tuning needs one to time. To check every config's correctness only "
                         "(Triton ops, under TRITON_INTERPRET=1; nothing is written) pass --device cpu")
    if resolve_device(config) == "cpu":
        return check_only(args, op_dir, config, prior)
    out = args.out or op_dir / (PRIOR_NAME if prior else BASELINE_NAME)
    partial = partial_path(out, platform_info.current().gpu)
    baseline = sweep_baseline(op_dir, config, progress=_stderr, partial=partial, chunk=args.chunk or CHUNK,
                              prior=prior)
    write_atomic(out, baseline.model_dump_json(indent=1) + "\n")
    partial.unlink(missing_ok=True)
    if args.json:
        print(baseline.model_dump_json(indent=2))
        return 0
    print(f"{canonical_op_id(baseline.op_id)} on {baseline.device}: swept "
          + "; ".join(f"{k} in {v} (original: {baseline.original_config[k]})" for k, v in baseline.parameters.items()))
    dropped = [c for c in baseline.configs if not c.ok]
    if baseline.configs_from:
        print(f"configs: {baseline.configs_from}")
    print(f"{len(baseline.configs)} configs, {len(dropped)} dropped by the checks"
          + (f" (first: {dropped[0].config}: {(dropped[0].failure or '')[:120]})" if dropped else ""))
    partly = [c for c in baseline.configs if c.ok and c.refused]
    if partly:
        print(f"{len(partly)} config(s) the GPU refused to launch at some shapes compete only where they ran, and no "
              f"retune serves them (first: {partly[0].config}: {partly[0].refused[0][:120]})")
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


def _read_prior(path: Path) -> SweepBaseline:
    try:
        return SweepBaseline.model_validate_json(path.read_text())
    except OSError as e:
        raise AstraError(f"--prior {path}: cannot read it ({e.strerror})") from None
    except ValueError as e:
        raise AstraError(f"--prior {path}: not a sweep baseline ({str(e).splitlines()[0]})") from None


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def check_only(args: argparse.Namespace, op_dir: Path, config: EvalConfig,
               prior: tuple[SweepBaseline, int] | None = None) -> int:
    """``tune --device cpu``: every config of the original checked under the interpreter on the test shapes,
    nothing timed and nothing written. Interpreter times are host calls of a simulator: persisted as a
    baseline they would later be shown as the bar a candidate beat (as an earlier version did)."""
    from astra_sglang.harness import sweep_baseline
    from astra_sglang.harness.parent.tune_baseline import BASELINE_NAME, PRIOR_NAME

    if args.shapes not in (None, "test"):
        raise AstraError(f"--device cpu checks the configs on the test shapes only (--shapes {args.shapes} would "
                         "run for hours in the Triton interpreter and time nothing); drop --shapes")
    config = config.model_copy(update={"shapes": "test", "timing": False})
    header = [f"{op_dir.name}: correctness-only sweep under the Triton CPU interpreter (no GPU: nothing is timed "
              "or written), one line per config:"]

    def progress(line: str) -> None:  # the header only once the sweep runs: bad input stays one line
        while header:
            _stderr(header.pop())
        _stderr(line)

    baseline = sweep_baseline(op_dir, config, progress=progress, prior=prior)
    if args.json:
        print(baseline.model_dump_json(indent=2))
    dropped = [c for c in baseline.configs if not c.ok]
    print(f"{canonical_op_id(baseline.op_id)} on {baseline.device}: {len(baseline.configs)} configs of "
          + ", ".join(f"{k} in {v}" for k, v in baseline.parameters.items())
          + f" checked on the test shapes: {len(baseline.configs) - len(dropped)} correct, {len(dropped)} dropped"
          + (f" (first: {dropped[0].config}: {(dropped[0].failure or '')[:120]})" if dropped else ""))
    print(f"nothing written to {args.out or op_dir / (PRIOR_NAME if prior else BASELINE_NAME)}: a sweep baseline is a GPU "
          f"measurement; run `astra-sglang tune {op_dir.name}` on a GPU host")
    return 0
