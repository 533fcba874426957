#!/usr/bin/env python3
"""GPU acceptance run of the harness on the H200 (issue 3). Needs no SGLang: extracted folders + torch, triton,
nvcc, ninja, pydantic, rich, apache-tvm-ffi.

Parts (default: all):
  self    the original against itself on the paper shapes of silu_and_mul, fused_add_rmsnorm, merge_state: every
          shape must be 1.00x within the reported spread ('no change'); FlashInfer baselines timed beside it
  repeat  `bench` twice (the original alone, paper shapes + the anchor shapes): medians agree within 2% on shapes
          of 5 us and more
  broken  every deliberately broken candidate (Triton for merge_state, CUDA for fused_add_rmsnorm/silu_and_mul)
          must be rejected; correct hand-written candidates must pass; per-candidate wall time (target <= 30 s)

  python scripts/gpu_harness_check.py [--part self|repeat|broken|all] [--ops ...]
Writes gpu_harness_check.json (and the printed tables) under $OUT when set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from astra_sglang.contract.eval_config import EvalConfig  # noqa: E402
from astra_sglang.contract.op import load_manifest  # noqa: E402
from astra_sglang.harness.evaluate import evaluate, evaluate_many  # noqa: E402
from astra_sglang.harness.report import print_result  # noqa: E402

OPS = ["silu_and_mul", "fused_add_rmsnorm", "merge_state"]
CANDS = REPO / "tests" / "candidates"
OUT = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
console = Console(record=True, width=160)


def original_source(op: Path) -> Path:
    m = load_manifest(op)
    return op / (m.recipe.sources[0] if m.recipe.kind == "cuda_jit" else m.recipe.source)


def part_self(ops: list[str], extracted: Path) -> dict:
    out = {}
    for name in ops:
        op = extracted / name
        r = evaluate(op, original_source(op), EvalConfig(shapes="paper", timing_dtypes=["bfloat16"]))
        print_result(r, console)
        rows = []
        ok = r.ok and r.timing is not None and bool(r.timing.shapes)
        for s in (r.timing.shapes if r.timing else []):
            within = abs(s.speedup - 1.0) * 100 <= max(s.spread_pct, 1.0)
            ok &= within and s.verdict == "no change"
            rows.append(dict(dims=s.dims, original_us=s.original_us, candidate_us=s.candidate_us, speedup=s.speedup,
                             spread_pct=s.spread_pct, verdict=s.verdict, baseline=s.baseline_name,
                             baseline_us=s.baseline_us, pct_ceiling=s.original_pct_ceiling))
        if r.timing:
            t = Table(title=f"{name}: original vs itself + serving baseline (bf16, cold L2)")
            for c in ("shape", "original us", "itself us", "speedup", "spread %", "verdict", "% ceil", "baseline", "us"):
                t.add_column(c)
            for row in rows:
                t.add_row("x".join(map(str, row["dims"].values())), f"{row['original_us']:.2f}",
                          f"{row['candidate_us']:.2f}", f"{row['speedup']:.3f}", f"{row['spread_pct']:.1f}",
                          row["verdict"], f"{row['pct_ceiling']:.0f}", row["baseline"] or "-",
                          f"{row['baseline_us']:.2f}" if row["baseline_us"] else "-")
            console.print(t)
        console.print(f"[bold]{name}: original vs itself {'PASS' if ok else 'FAIL'}[/] (wall {r.wall_s:.1f} s)")
        out[name] = dict(ok=ok, rows=rows, notes=r.correctness.notes if r.correctness else [], wall_s=r.wall_s,
                         ceiling=r.timing.copy_ceiling_gbps if r.timing else None, error=r.error)
    return out


def part_repeat(ops: list[str], extracted: Path) -> dict:
    out = {}
    for name in ops:
        op = extracted / name
        m = load_manifest(op)
        cfg = EvalConfig(shapes="all", timing_dtypes=["bfloat16"], check_all_shapes=False, distributions=["normal"],
                         dtypes=["bfloat16"])
        keep = [s.dims for s in m.shapes if {"paper", "anchor"} & set(s.tags)]
        runs = []
        for _ in range(2):
            r = evaluate(op, None, cfg)
            runs.append({json.dumps(s.dims): s.original_us for s in (r.timing.shapes if r.timing else [])})
        t = Table(title=f"{name}: two bench runs (original, bf16, cold L2)")
        for c in ("shape", "run 1 us", "run 2 us", "diff %", "tag"):
            t.add_column(c)
        rows, ok = [], True
        for key in runs[0]:
            dims = json.loads(key)
            a, b = runs[0][key], runs[1].get(key)
            if b is None:
                continue
            diff = 100 * abs(a - b) / min(a, b)
            big = min(a, b) >= 5.0
            if big:
                ok &= diff < 2.0
            tag = ("paper/anchor " if dims in keep else "") + (">=5us" if big else "<5us")
            rows.append(dict(dims=dims, run1=a, run2=b, diff_pct=diff, at_least_5us=big))
            t.add_row("x".join(map(str, dims.values())), f"{a:.2f}", f"{b:.2f}", f"{diff:.2f}", tag)
        console.print(t)
        n_big = sum(r["at_least_5us"] for r in rows)
        console.print(f"[bold]{name}: repeatability {'PASS' if ok else 'FAIL'}[/] ({n_big} shapes >= 5 us within 2%)")
        out[name] = dict(ok=ok, rows=rows)
    return out


def _broken(op_name: str) -> list[Path]:
    d = CANDS / op_name
    files = sorted((d / "broken").glob("*.py")) + sorted((d / "broken").glob("*.cuh"))
    if os.environ.get("ASTRA_GPU_CHECK_CPU_FIXTURES") == "1":  # the h_* fixtures also run in CPU CI
        files += [p for p in sorted(d.glob("h_*.*")) if p.name not in ("h_correct.py", "h_wrong_on_long_inputs.py")]
    return files


def _correct(op_name: str) -> list[Path]:
    d = CANDS / op_name
    return [p for p in (d / "h_correct.py", d / "hand_written.py", d / "hand_written.cuh") if p.exists()]


def part_broken(ops: list[str], extracted: Path) -> dict:
    out = {}
    t = Table(title="candidates (paper shapes checked + timed, all manifest shapes checked, held-out included)")
    for c in ("op", "candidate", "expected", "verdict", "reason", "detail", "wall s"):
        t.add_column(c, overflow="fold")
    all_ok = True
    for name in ops:
        op = extracted / name
        broken, correct = _broken(name), _correct(name)
        if not broken and not correct:
            continue
        cfg = EvalConfig(shapes="paper", include_heldout=True, timing_dtypes=["bfloat16"], timeout_s=30)
        t0 = time.monotonic()
        results = evaluate_many(op, broken + correct, cfg)
        total = time.monotonic() - t0
        for path, r in zip(broken + correct, results):
            want_ok = path in correct
            f = r.correctness.first_failure if r.correctness else None
            reason = "build failed" if not r.build.ok else (f.reason if f else ("-" if r.ok else "error"))
            good = r.ok == want_ok
            all_ok &= good
            detail = (f.detail if f else (r.error or "")) or ""
            if r.ok and r.timing is not None:
                detail = f"geomean {r.timing.geomean_speedup:.3f}x"
            t.add_row(name, str(path.relative_to(CANDS / name)), "pass" if want_ok else "reject",
                      ("[green]" if good else "[red]") + ("passed" if r.ok else "rejected") + "[/]", reason,
                      detail[:160], f"{r.wall_s:.1f}")
            out[f"{name}/{path.name}"] = dict(expected_ok=want_ok, ok=r.ok, reason=reason, detail=detail[:2000],
                                              wall_s=r.wall_s, geomean=r.geomean_speedup,
                                              result=json.loads(r.model_dump_json()))
        console.print(f"{name}: {len(results)} candidates in {total:.1f} s ({total / max(1, len(results)):.1f} s each)")
    console.print(t)
    console.print(f"[bold]broken rejected / correct passed: {'PASS' if all_ok else 'FAIL'}[/]")
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=["self", "repeat", "broken", "all"], default="all")
    ap.add_argument("--ops", nargs="*", default=OPS)
    ap.add_argument("--extracted", type=Path, default=REPO / "extracted")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        console.print("no CUDA GPU visible: this script is for the H200")
        return 2
    report: dict = {"device": torch.cuda.get_device_name(), "parts": {}}
    t0 = time.monotonic()
    for part, fn in (("self", part_self), ("repeat", part_repeat), ("broken", part_broken)):
        if args.part in (part, "all"):
            report["parts"][part] = fn(args.ops, args.extracted)
    report["wall_s"] = time.monotonic() - t0
    if OUT is not None:
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / f"gpu_harness_check_{args.part}.json").write_text(json.dumps(report, indent=1, default=str))
        (OUT / f"gpu_harness_check_{args.part}.txt").write_text(console.export_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
