"""``astra-sglang validate-contract OP``: accept (or refuse) an op's contract by running its original kernel
against the contract's reference on every shape x dtype x distribution, and record the outcome."""

from __future__ import annotations

import argparse
from pathlib import Path

from astra_sglang.contract.op import MANIFEST_NAME, find_op_dir
from astra_sglang.contract.validation import ContractValidation
from astra_sglang.errors import AstraError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "validate-contract", help="check an op's original kernel against its contract's reference",
        description="Runs the original kernel of each OP (built stand-alone from its folder) against the "
                    "contract's reference on every manifest shape, dtype and value distribution (on CPU: a Triton "
                    "op's test shapes under TRITON_INTERPRET=1, less what the interpreter cannot run, said by "
                    "name), times it on its largest shape on a GPU, and appends the result to OP/validation.json "
                    "(on CPU only with --record). `optimize` needs a passing record. Exit 1 if any "
                    "contract disagrees with its kernel: a finding, never a reason to loosen a tolerance.")
    p.add_argument("ops", metavar="OP", nargs="*", help="extracted op short names or folders")
    p.add_argument("--all", action="store_true", help="every op folder under --extracted")
    p.add_argument("--shapes", choices=["auto", "all", "test"], default="auto",
                   help="auto = all manifest shapes on a GPU, the test shapes on CPU")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                   help="auto = the GPU if there is one; cpu = correctness only (Triton ops, TRITON_INTERPRET=1)")
    p.add_argument("--jobs", type=int, default=1,
                   help="validate this many ops at once (correctness only; each is then timed alone, one by one)")
    p.add_argument("--time", metavar="OP,OP", type=lambda v: {x.strip() for x in v.split(",") if x.strip()},
                   help="with --jobs: time only these ops' originals after the parallel check (default: all)")
    rec = p.add_mutually_exclusive_group()
    rec.add_argument("--record", action="store_true",
                     help="append the results to OP/validation.json also on CPU (the default on a GPU only: an "
                          "interpreter run checks the small test shapes and times nothing)")
    rec.add_argument("--no-record", action="store_true", help="report only; leave validation.json alone")
    p.add_argument("--table", type=Path, help="also write the results as a markdown table to this file")
    p.add_argument("--json", type=Path, help="also write the validation records as JSON to this file")
    p.add_argument("--extracted", type=Path, default=Path("extracted"), help="extracted ops root (default: extracted/)")
    p.set_defaults(handler=handle)


def _folders(args: argparse.Namespace) -> list[Path]:
    if args.all:
        root = Path(args.extracted)
        found = sorted(p for p in root.iterdir() if (p / MANIFEST_NAME).is_file()) if root.is_dir() else []
        if not found:
            raise AstraError(f"no extracted op folders under {root}/; run `astra-sglang extract OP` first")
        return found
    if not args.ops:
        raise AstraError("name at least one OP, or pass --all")
    return [find_op_dir(op, args.extracted) for op in args.ops]


def _line(name: str, v: ContractValidation) -> str:
    worst = max((u for _, u in v.max_error.values()), default=0.0)
    t = v.timed
    timed = f"{t.original_us:.1f} us at {t.dims} = {t.pct_copy_ceiling:.0f}% of copy" if t else "not timed"
    verdict = ("PASS" if v.passed else f"FAIL: {v.first_failure}") + _findings(v)
    skipped = "".join(f" | skipped: {d} {why}" for d, why in v.skipped.items())
    return (f"{name}: {verdict} | {v.cases_run} cases ({v.cases_skipped} refused by the original) over {v.shapes} "
            f"shapes x {'/'.join(v.dtypes)} x {len(v.distributions)} distributions on {v.device} | worst error "
            f"{worst:.2f} of tolerance | {timed}{skipped}")


def _findings(v: ContractValidation) -> str:
    """" (kernel finding on 'zeros' reproduced)": a documented SGLang bug, outside the pass verdict."""
    stale = "NOT reproduced: drop it from the manifest"
    return "".join(f" (kernel finding on {f.distribution!r} {'reproduced' if f.reproduced else stale})"
                   for f in v.findings)


def markdown_table(rows: list[tuple[str, ContractValidation]]) -> str:
    out = ["| op | result | shapes | dtypes | distributions | cases (refused) | max abs err | max share of tol "
           "| original on largest shape | % of copy |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, v in rows:
        err = max((a for a, _ in v.max_error.values()), default=0.0)
        share = max((u for _, u in v.max_error.values()), default=0.0)
        t = v.timed
        timed = f"{t.original_us:.2f} us {t.dims} {t.dtype}" if t else "-"
        pct = f"{t.pct_copy_ceiling:.0f}%" if t else "-"
        res = ("pass" if v.passed else "FAIL: " + (v.first_failure or "")[:160].replace("|", "/")) + _findings(v)
        if v.skipped:
            res += f" ({'/'.join(v.skipped)} skipped: interpreter limit)"
        out.append(f"| {name} | {res} | {v.shapes} | {', '.join(v.dtypes)} | {len(v.distributions)} | "
                   f"{v.cases_run} ({v.cases_skipped}) | {err:.3g} | {share:.2f} | {timed} | {pct} |")
    return "\n".join(out) + "\n"


def handle(args: argparse.Namespace) -> int:
    import json
    from concurrent.futures import ThreadPoolExecutor, as_completed

    from astra_sglang.contract.op import Manifest, load_manifest
    from astra_sglang.contract.validation import record_validation
    from astra_sglang.harness import resolve_device
    from astra_sglang.harness.parent.contract_validation import (
        interpreter_limit,
        time_original,
        validate_contract,
        validation_config,
    )

    device = resolve_device(validation_config(args.device))
    record = args.record or (device == "cuda" and not args.no_record)  # an interpreter run only when asked
    todo: list[tuple[Path, Manifest]] = []
    folders = _folders(args)
    need_gpu = interpreter = 0
    for folder in folders:
        manifest = load_manifest(folder)
        limit = interpreter_limit(manifest, device)
        if device == "cpu" and manifest.source_kind == "cuda_jit":
            need_gpu += 1
            print(f"{manifest.short_name}: skipped: a CUDA kernel needs a GPU to run (validate it on a GPU host)")
            continue
        if limit is not None and limit[0] is None:
            interpreter += 1
            print(f"{manifest.short_name}: skipped: {limit[1]} (validate it on a GPU host)")
            continue
        todo.append((folder, manifest))
    parallel = max(1, args.jobs) > 1
    config = validation_config(device, args.shapes, timing=not parallel)  # parallel: time each alone afterwards

    def one(item: tuple[Path, Manifest]) -> ContractValidation | str:
        try:
            return validate_contract(item[0], config)[0]
        except AstraError as e:  # this op cannot even be run (a missing file, no build): say so, go on
            return str(e)

    rows: list[tuple[str, ContractValidation]] = []
    failed = 0

    def finish(folder: Path, manifest: Manifest, v: ContractValidation | str) -> None:
        """Record and print one op as soon as it is done: an interrupted session keeps every finished op."""
        nonlocal failed
        if isinstance(v, str):
            failed += 1
            print(f"{manifest.short_name}: ERROR: {v}", flush=True)
            return
        if record:
            record_validation(folder, manifest.op_id, v)
        failed += not v.passed
        rows.append((manifest.short_name, v))
        print(_line(manifest.short_name, v), flush=True)

    try:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = {pool.submit(one, item): item for item in todo}
            for fut in as_completed(futures):
                finish(*futures[fut], fut.result())
        # timing only once every check is done: parallel checks on one GPU would disturb it
        for n, (name, v) in enumerate(rows):
            folder, manifest = next(item for item in todo if item[1].short_name == name)
            if (parallel and device == "cuda" and v.passed
                    and (args.time is None or name in args.time)):
                rows[n] = (name, time_original(folder, v, config))
                if record:  # a second record: the same validation, now with the original's time
                    record_validation(folder, manifest.op_id, rows[n][1])
                print(_line(name, rows[n][1]), flush=True)
    finally:
        if args.table:
            args.table.write_text(markdown_table(rows))
        if args.json:
            args.json.write_text(json.dumps({n: v.model_dump() for n, v in rows}, indent=2))
    print(totals_line(len(folders), rows, failed, need_gpu, interpreter))
    print(where_line(args, device, record, len(rows)))
    return 1 if failed else 0


def totals_line(total: int, rows: list[tuple[str, ContractValidation]], failed: int, need_gpu: int,
                interpreter: int) -> str:
    """'42 contracts: 27 pass (4 without bfloat16: interpreter limit), 15 skipped (...), 0 fail': a run over
    many ops is read from its last line; every op is in exactly one of the three counts."""
    passed = [v for _, v in rows if v.passed]
    partial = sorted({d for v in passed for d in v.skipped})
    part = sum(1 for v in passed if v.skipped)
    why = [f"{need_gpu} need a GPU"] * bool(need_gpu) + [f"{interpreter} interpreter limits"] * bool(interpreter)
    return (f"{total} contracts: {len(passed)} pass"
            + (f" ({part} without {'/'.join(partial)}: interpreter limit)" if part else "")
            + f", {need_gpu + interpreter} skipped" + (f" ({', '.join(why)})" if why else "") + f", {failed} fail")


def where_line(args: argparse.Namespace, device: str, record: bool, n: int) -> str:
    """Where the results went: a CPU run leaves the committed validation.json alone unless asked."""
    extra = [f"--table {args.table}"] * bool(args.table) + [f"--json {args.json}"] * bool(args.json)
    also = f" and {', '.join(extra)}" if extra else ""
    if record:
        return f"results: appended to validation.json in each of the {n} op folder(s) above{also}"
    why = ("--no-record" if args.no_record else
           "a CPU (Triton interpreter) run; --record appends it")
    return f"results: this output{also}; validation.json left unchanged ({why})"
