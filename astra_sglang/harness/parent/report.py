"""Human-readable rendering of an EvalResult (rich tables), shared by `bench` and the GPU check script."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from astra_sglang.contract.op import canonical_op_id
from astra_sglang.contract.result import EvalResult


def _dims(d: dict[str, int]) -> str:
    return "x".join(str(v) for v in d.values()) if d else "-"


def _f(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def summary_lines(r: EvalResult) -> list[str]:
    who = r.candidate or "original (no candidate)"
    lines = [f"{canonical_op_id(r.op_id)}: {who} on {r.device}"]
    b = r.build
    build = "built" + (" (cached)" if b.cached else f" in {b.seconds:.1f} s") if b.ok else "BUILD FAILED"
    if b.resources:
        k = b.resources[0]
        build += (f"; {len(b.resources)} kernel(s), first: {k.registers} regs, {k.spill_stores_bytes or 0} B spill "
                  f"stores, {k.smem_bytes or 0} B smem")
    lines.append(build)
    if not b.ok:
        lines.append(b.log.strip()[:2000])
    c = r.correctness
    if c is not None:
        if c.ok:
            lines.append(f"correct: {c.cases_run} cases ({c.heldout_cases_run} held-out), {c.skipped_cases} skipped "
                         "where the original refuses")
        elif c.first_failure is not None:
            f = c.first_failure
            where = "held-out case" if f.heldout else f"{_dims(f.dims)} {f.dtype} {f.distribution} seed={f.seed}"
            errs = "" if f.max_abs_err is None else f" (max abs err {f.max_abs_err:.3g}, rel {f.max_rel_err:.3g})"
            lines.append(f"NOT CORRECT [{f.reason}] at {where}{errs}: {f.detail}")
    if r.error and (c is None or c.ok):
        lines.append(f"error: {r.error}")
    if r.sweep is not None:
        sw = r.sweep
        dropped = [c for c in sw.configs if not c.ok]
        lines.append(f"tuned: {len(sw.configs)} configs swept in {sw.wall_s:.1f} s, {len(dropped)} dropped"
                     + (f" (first: {dropped[0].config}: {(dropped[0].failure or '')[:150]})" if dropped else ""))
        chosen = "one config everywhere" if sw.single else f"{len(sw.choice)} shape buckets"
        lines.append(f"frozen ({chosen}): {sw.frozen_path}; the rows below evaluate that frozen source")
        lines += [f"  {_dims(c.dims)}: {c.config} {c.speedup:.3f}x in the sweep" for c in sw.choice[:12]]
        if sw.note:
            lines.append(sw.note)
    if r.sandbox is not None:
        lines.append(f"worker sandbox: {r.sandbox}")
    if r.timing is None and r.device.startswith("cpu"):
        lines.append("timing skipped: no CUDA GPU (correctness only, under TRITON_INTERPRET=1)")
    lines.append(f"wall time {r.wall_s:.1f} s")
    return lines


def timing_table(r: EvalResult) -> Table | None:
    t = r.timing
    if t is None:
        return None
    has_cand = r.candidate is not None
    served = any(s.served_by for s in t.shapes)  # the op says what SGLang serves per shape: show the comparison
    table = Table(title=f"{canonical_op_id(r.op_id)} - {t.mode} L2, copy ceiling {t.copy_ceiling_gbps:.0f} GB/s",
                  caption=t.method)
    cols = ["shape", "dtype", "MB", "original us", "GB/s", "% ceil"]
    if has_cand:
        cols += ["candidate us", "GB/s", "% ceil", "speedup"]
    if served:
        cols += ["SGLang serves", "served us"] + (["vs served"] if has_cand else [])
    cols += ["spread %"] + (["verdict"] if has_cand else [])
    for col in cols:
        table.add_column(col, justify="left" if col in ("shape", "dtype", "verdict") else "right")
    for s in t.shapes:
        orig = f"{s.original_us:.2f}" + (" (refuses: served)" if s.original_refused else "")
        row = [_dims(s.dims), s.dtype, f"{s.bytes_moved / 1e6:.1f}", orig, f"{s.original_gbps:.0f}",
               f"{s.original_pct_ceiling:.1f}"]
        if has_cand:
            row += [_f(s.candidate_us, ".2f"), _f(s.candidate_gbps, ".0f"), _f(s.candidate_pct_ceiling, ".1f"),
                    _f(s.speedup, ".3f") + "x"]
        if served:
            row += [s.served_by or "-", _f(s.served_us, ".2f")] + ([_f(s.served_speedup, ".3f") + "x"] if has_cand
                                                                  else [])
        row += [f"{s.spread_pct:.1f}"] + ([s.verdict] if has_cand else [])
        table.add_row(*row)
    if has_cand and t.geomean_speedup is not None:
        table.add_section()
        vs_orig = t.geomean_vs_original if served else t.geomean_speedup
        tail = ["", "", f"{t.geomean_speedup:.3f}x"] if served else []
        table.add_row("geomean", "", "", "", "", "", "", "", "", _f(vs_orig, ".3f") + "x", *tail, "", "")
    return table


def print_result(r: EvalResult, console: Console | None = None) -> None:
    console = console or Console()
    for line in summary_lines(r):
        console.print(line, highlight=False, markup=False)
    table = timing_table(r)
    if table is not None:
        console.print(table)
    for s in (r.timing.suspect if r.timing else []):
        console.print(f"SUSPECT: {s}", highlight=False, markup=False)
