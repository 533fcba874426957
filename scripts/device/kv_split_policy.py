"""SGLang's own decode attention under its kv-split policies, timed against its default (issue 23, item 2).

The Triton backend splits each request's KV into ``num_kv_splits`` chunks: up to ``--triton-attention-num-kv-splits``
(MS, default 8; the workspace is [B, NQ, MS, D]), each request's count from ``get_num_kv_splits_triton`` (dynamic,
the default) or MS for every request (``SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS=true``). Both are server
settings, so a user can change them without a patch. This times SGLang's ``decode_attention_fwd`` (stages 1 and 2)
at each of the contract's timed shapes under every policy, all in one process against each other: one workload per
shape (the contract's own inputs), each policy's split counts and workspace made outside the timed CUDA graphs (the
backend computes them once per decode step, not per layer), ABBA-interleaved replays, L2 flushed before each replay,
medians. Only SGLang's code runs (no candidate): the parent process is fine. Each policy's output is compared with
the default's (relative to the output's size, per dtype): a different split moves bf16 results by about an ulp.

Usage (from the repository root, op folder restored): python3 scripts/device/kv_split_policy.py [--shapes paper]
    [--splits 4 8 16 32 64] [--rep 60] [--out DIR]
    (TRITON_INTERPRET=1 ... --device cpu: the interpreter, test shapes, a smoke run)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from astra_sglang.contract.eval_config import EvalConfig  # noqa: E402
from astra_sglang.contract.op import load_manifest  # noqa: E402
from astra_sglang.harness.shared.suite import contract_bytes, timed_shapes  # noqa: E402
from astra_sglang.harness.shared.tensors import ArgSet  # noqa: E402
from astra_sglang.harness.shared.timing import clock_for, interleave  # noqa: E402
from astra_sglang.loader.launch import load_inputs, make_launcher  # noqa: E402
from astra_sglang.loader.pyimport import load_function  # noqa: E402

DEFAULT = ("dynamic", 8)
TOL = {"bfloat16": 2e-2, "float16": 2e-3}  # |o - o_default| / max|o_default|: an ulp of either dtype, with room


def policies(splits: list[int]) -> list[tuple[str, int]]:
    return [DEFAULT] + [(kind, m) for kind in ("dynamic", "static") for m in splits if (kind, m) != DEFAULT]


def split_counts(inputs_py: Path, a: ArgSet, kind: str, ms: int) -> torch.Tensor:
    """What the backend's get_num_kv_splits gives this batch under the policy (inputs.py restates SGLang's kernel)."""
    indptr = a.tensors["kv_indptr"].view.long()
    lens = indptr[1:] - indptr[:-1]
    if kind == "static":
        return torch.full_like(lens, ms, dtype=torch.int32)
    restated = load_function(inputs_py, "num_kv_splits", prefix="astra_inputs")
    nq, nk = a.dims["NK"] * a.dims["G"], a.dims["NK"]
    return restated(lens, nq, nk, ms).to(torch.int32)


def time_sides(clock: Any, graphs: list[Any], flush: torch.Tensor, warmup: int, rep: int) -> list[list[float]]:
    """Each policy's captured call, replayed ``rep`` times ABBA-interleaved with the others, L2 flushed before each
    replay (outside the timed events)."""
    times: list[list[float]] = [[] for _ in graphs]

    def cold(i: int) -> None:
        flush.zero_()

    def side(j: int) -> Any:
        return lambda k: times[j].extend(clock.time_replays(graphs[j], k, 1, between=cold))
    for g in graphs:
        clock.time_replays(g, warmup, 1, between=cold)
    interleave([side(j) for j in range(len(graphs))], rep)
    return times


def run(op_dir: Path, shapes: str, splits: list[int], dtype: str, device: str, rep: int, warmup: int) -> dict[str, Any]:
    m = load_manifest(op_dir)
    make, scalars = load_inputs(op_dir, m)
    assert m.inputs is not None
    inputs_py = op_dir / m.inputs.path
    launch = make_launcher(op_dir, m, dtype)
    clock = clock_for(device)
    flush = torch.empty(max(4 * clock.l2_bytes() // 4, 1), dtype=torch.int32, device=device)
    rows = []
    for dims in timed_shapes(m, EvalConfig(shapes=shapes)):
        a = ArgSet(m, dims, dtype, device, (make, scalars))
        a.fill("normal", torch.Generator(device=device).manual_seed(7))
        base = a.args()
        b, nq, d = dims["B"], dims["NK"] * dims["G"], dims["D"]
        sides, outs = [], {}
        for kind, ms in policies(splits):
            args = {**base, "max_kv_splits": ms, "num_kv_splits": split_counts(inputs_py, a, kind, ms).to(device),
                    "attn_logits": torch.empty((b, nq, ms, d), dtype=torch.float32, device=device),
                    "attn_lse": torch.empty((b, nq, ms), dtype=torch.float32, device=device),
                    "o": torch.empty_like(base["o"])}
            sides.append((kind, ms, args))
        graphs = [clock.capture(lambda args=args: launch(args)) for _, _, args in sides]
        for _, _, args in sides:
            outs[id(args)] = args["o"].float().clone()
        times = time_sides(clock, graphs, flush, warmup, rep)
        ref = outs[id(sides[0][2])]
        scale = float(ref.abs().max()) or 1.0
        moved = contract_bytes(m, dims, dtype)
        default_us = statistics.median(times[0])
        row: dict[str, Any] = {"dims": dims, "dtype": dtype, "bytes_moved": moved, "policies": []}
        for (kind, ms, args), t in zip(sides, times, strict=True):
            us = statistics.median(t)
            err = float((outs[id(args)] - ref).abs().max()) / scale
            row["policies"].append({"policy": kind, "max_kv_splits": ms, "us": us, "speedup": default_us / us,
                                    "spread_pct": 100 * (statistics.quantiles(t, n=4)[2] - statistics.quantiles(t, n=4)[0]) / us
                                    if len(t) >= 4 else 0.0, "rel_err": err, "correct": err <= TOL[dtype]})
        best = max((p for p in row["policies"] if p["correct"]), key=lambda p: p["speedup"])
        row["best"] = best
        rows.append(row)
        print(f"{dims} default {default_us:.1f} us; best {best['policy']} MS {best['max_kv_splits']}: "
              f"{best['us']:.1f} us ({best['speedup']:.3f}x)", flush=True)
        del graphs, sides, a, base
        if device == "cuda":
            torch.cuda.empty_cache()
    geo = math.exp(sum(math.log(r["best"]["speedup"]) for r in rows) / len(rows)) if rows else None
    return {"op": m.op_id, "sglang_version": m.sglang_version, "device": clock.device_name(), "dtype": dtype,
            "shapes": shapes, "method": f"SGLang's decode_attention_fwd only, one process; per shape one workload; "
            f"cuda-graph replays, {warmup} warm-up and {rep} timed per policy, ABBA-interleaved, L2 flushed (4x L2 "
            "written) before each replay; medians" if device == "cuda" else "CPU smoke run: host timers of the "
            "Triton interpreter, no speed meaning", "copy_ceiling_gbps": clock.copy_ceiling_gbps(),
            "default": {"policy": DEFAULT[0], "max_kv_splits": DEFAULT[1]}, "geomean_best_speedup": geo, "rows": rows}


def table(rep: dict[str, Any]) -> str:
    pols = [(p["policy"], p["max_kv_splits"]) for p in rep["rows"][0]["policies"]] if rep["rows"] else []
    head = "| B S NK G P R QS | " + " | ".join(f"{k[0]}{ms}" for k, ms in pols) + " | best |"
    lines = [f"{rep['op']} on {rep['device']}, {rep['dtype']}: us per call (speedup over dynamic MS 8); "
             f"geomean of the best correct policy per shape {rep['geomean_best_speedup']:.3f}x", "",
             head, "|" + "---|" * (len(pols) + 2)]
    for r in rep["rows"]:
        d = r["dims"]
        key = " ".join(str(d.get(k, "-")) for k in ("B", "S", "NK", "G", "P", "R", "QS"))
        cells = [f"{p['us']:.1f} ({p['speedup']:.2f}x){'' if p['correct'] else ' WRONG'}" for p in r["policies"]]
        b = r["best"]
        lines.append(f"| {key} | " + " | ".join(cells) + f" | {b['policy']} {b['max_kv_splits']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--op-dir", type=Path, default=REPO / "extracted" / "decode_attention")
    p.add_argument("--shapes", default=None, help="contract shape set (default paper; test on --device cpu)")
    p.add_argument("--splits", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--rep", type=int, default=60)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        p.error("--device cpu runs SGLang's kernel under the Triton interpreter: set TRITON_INTERPRET=1 before "
                "starting (it must be on when triton is first imported)")
    shapes = args.shapes or ("paper" if args.device == "cuda" else "test")
    t0 = time.monotonic()
    rep = run(args.op_dir.resolve(), shapes, args.splits, args.dtype, args.device, args.rep, args.warmup)
    rep["wall_s"] = time.monotonic() - t0
    text = table(rep)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "kv_split_policy.json").write_text(json.dumps(rep, indent=1) + "\n")
        (args.out / "kv_split_policy.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
