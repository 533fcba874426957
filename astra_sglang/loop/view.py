"""What the user watches: a rich live panel (round, agent, step, best speedup so far) and the final table.

Without a terminal (CI, a log file) the same updates are printed as plain lines instead.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from astra_sglang.contract.result import EvalResult, SweepBaseline
from astra_sglang.loop.records import RoundRecord, WinnerInfo
from astra_sglang.loop.report import copy_bound_us
from astra_sglang.loop.winner import same_gpu_text


def _fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


class LiveView:
    def __init__(self, title: str, rounds: int, label: str | None = None, console: Console | None = None,
                 live: bool | None = None) -> None:
        self.console = console or Console()
        self.title = title
        self.rounds = rounds
        self.label = label
        self.round: int | None = None
        self.agent = "-"
        self.step = "starting"
        self.best: float | None = None
        self.best_round: int | None = None
        self.events: list[str] = []
        use_live = self.console.is_terminal if live is None else live
        self._live = Live(self._render(), console=self.console, refresh_per_second=4, transient=False) if use_live else None

    def __enter__(self) -> LiveView:
        if self._live is not None:
            self._live.start()
        elif self.label:
            self.console.print(f"[bold yellow]{self.label}[/]")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.stop()

    def _render(self) -> Panel:
        head = Table.grid(padding=(0, 2))
        head.add_row("round", f"{self.round if self.round is not None else '-'} / {self.rounds}")
        head.add_row("agent", self.agent)
        head.add_row("step", self.step)
        best = "-" if self.best is None else f"{self.best:.3f}x (round {self.best_round})"
        head.add_row("best speedup", best)
        parts: list = [head]
        if self.label:
            parts.insert(0, Text(self.label, style="bold yellow"))
        if self.events:
            parts.append(Text("\n".join(self.events[-6:]), style="dim"))
        return Panel(Group(*parts), title=self.title)

    def _refresh(self, line: str) -> None:
        if self._live is not None:
            self._live.update(self._render())
        else:
            self.console.print(line, highlight=False)

    def update(self, round: int | None, agent: str, step: str) -> None:
        self.round, self.agent, self.step = round, agent, step
        self._refresh(f"[round {round if round is not None else '-'}/{self.rounds}] {agent}: {step}")

    def event(self, text: str) -> None:
        self.events.append(text)
        self._refresh(f"  {text}")

    def round_done(self, record: RoundRecord) -> None:
        if record.correct and record.round > 0 and record.geomean_speedup is not None and not record.timing_suspect:
            if self.best is None or record.geomean_speedup > self.best:
                self.best, self.best_round = record.geomean_speedup, record.round
        sp = "" if record.geomean_speedup is None else f", geomean {record.geomean_speedup:.3f}x"
        self.event(f"round {record.round}: {record.status}{sp}" + (f" ({record.error})" if record.error else ""))


def final_table(records: list[RoundRecord], winner: WinnerInfo | None, title: str,
                label: str | None = None) -> Table:
    caption = None
    if winner is not None:
        which = f"round {winner.round}" + (f" candidate {winner.candidate}" if winner.candidate is not None else "")
        caption = (f"winner: {which}, {winner.geomean_speedup:.3f}x geomean, held-out "
                   f"{'confirmed' if winner.heldout_ok else 'not confirmed'}" if winner.round is not None
                   else f"no winner: {winner.reason}")
        if winner.timing_source:
            caption += f"\ntimes from: {winner.timing_source}"
    against = _against_sweep(records, winner)
    if against:
        caption = f"{caption}\n{against}" if caption else against
    if label:
        caption = f"{label}\n{caption or ''}"
    table = Table(title=title, caption=caption)
    for col in ("round", "base", "status", "correct", "geomean speedup", "fixes", "tokens in/out", "wall s", "note"):
        table.add_column(col, justify="right" if col in ("round", "base", "geomean speedup", "fixes", "wall s") else "left")
    for r in records:
        note = r.first_failure or r.error or r.changes or ""
        if r.candidates:  # K candidates: the row is the round's best; say what the others did
            note = f"c{r.candidate} of " + "/".join(c.status for c in r.candidates) + ": " + note
        style = "bold green" if winner is not None and winner.round == r.round else None
        table.add_row(str(r.round), "-" if r.base_round is None else str(r.base_round), r.status,
                      {True: "yes", False: "NO", None: "-"}[r.correct], _fmt(r.geomean_speedup), str(r.fix_attempts),
                      f"{r.tokens.input_tokens}/{r.tokens.output_tokens}", f"{r.wall_s:.1f}",
                      (note[:70] + "...") if len(note) > 70 else note, style=style)
    return table


def _baseline(records: list[RoundRecord]) -> SweepBaseline | None:
    r0 = next((r for r in records if r.round == 0), None)
    return r0.sweep_baseline.baseline if r0 is not None and r0.sweep_baseline is not None else None


def _against_sweep(records: list[RoundRecord], winner: WinnerInfo | None) -> str | None:
    """Whether the winner beats the original retuned (its own launch parameters swept per shape)."""
    r0 = next((r for r in records if r.round == 0), None)
    if r0 is None or r0.sweep_baseline is None:
        return None
    from astra_sglang.harness.parent.tune_baseline import measured_on_gpu

    b = r0.sweep_baseline.baseline
    if b is not None and not measured_on_gpu(b):  # interpreter host times: no speedup to show, none to beat
        return f"sweep baseline: none (the sweep ran on {b.device}, where nothing is measured; tune on a GPU host)"
    geo = b.geomean_speedup if b is not None else None
    if geo is None or b is None:
        return f"sweep baseline: {r0.sweep_baseline.error or 'not timed on this device'}"
    if winner is None or winner.round is None or winner.geomean_speedup is None:
        return f"sweep baseline (the original retuned): {geo:.3f}x"
    there = (winner.timing_source or "").split(";", 1)[0]
    if not same_gpu_text(there, b.device):
        return (f"sweep baseline (the original retuned): {geo:.3f}x on {b.device}; the winner was timed on "
                f"{there or 'an unknown GPU'}: not compared")
    if winner.geomean_speedup <= geo:
        return (f"the winner ({winner.geomean_speedup:.3f}x) does NOT beat the sweep baseline ({geo:.3f}x: the "
                "original with its launch parameters retuned per shape)")
    return f"the winner beats the sweep baseline ({geo:.3f}x: the original with its launch parameters retuned)"


def shape_table(records: list[RoundRecord], winner: WinnerInfo | None,
                best: EvalResult | None = None) -> Table | None:
    """Per timed shape: the original, the sweep baseline, the best candidate and the copy bound, in us. With the
    winner's ``best`` result (best/result.json, on the GPU the run ranked on) every column comes from that GPU:
    the original as timed beside the winner, the sweep only when it ran there; round 0's own times and another
    GPU's sweep do not stand beside it."""
    if best is not None and best.timing is not None and best.timing.shapes:
        return _winner_shapes(records, best)
    r0 = next((r for r in records if r.round == 0), None)
    if r0 is None or not r0.times:
        return None
    top = next((r for r in records if winner is not None and r.round == winner.round and r.round != 0), None)
    if top is None:
        top = max((r for r in records if r.round > 0 and r.correct and r.times and r.geomean_speedup),
                  key=lambda r: r.geomean_speedup or 0.0, default=None)
    b0 = _baseline(records)
    base = {repr(sorted(s.dims.items())): s for s in (b0.shapes if b0 is not None else [])}
    cand = {(repr(sorted(t.dims.items())), t.dtype): t for t in (top.times if top else [])}
    table = Table(title="per shape (us)" + (f"; best candidate: round {top.round}" if top else ""))
    for col in ("shape", "dtype", "original", "sweep baseline", "best candidate", "copy bound"):
        table.add_column(col, justify="left" if col in ("shape", "dtype") else "right")
    for t in r0.times:
        key = repr(sorted(t.dims.items()))
        b, c = base.get(key), cand.get((key, t.dtype))
        ceiling = t.original_gbps * 100.0 / t.original_pct_ceiling if t.original_pct_ceiling else None
        bound = t.bytes_moved / (ceiling * 1e3) if ceiling else None
        table.add_row("x".join(str(v) for v in t.dims.values()), t.dtype, _fmt(t.original_us, 2),
                      "-" if b is None else f"{b.best_us:.2f} ({b.speedup:.2f}x)",
                      "-" if c is None or c.candidate_us is None else f"{c.candidate_us:.2f} ({c.speedup or 0:.2f}x)",
                      _fmt(bound, 2))
    return table


def _winner_shapes(records: list[RoundRecord], best: EvalResult) -> Table:
    assert best.timing is not None
    b0 = _baseline(records)
    here = b0 is not None and same_gpu_text(b0.device, best.device)
    base = {repr(sorted(s.dims.items())): s for s in (b0.shapes if b0 is not None and here else [])}
    note = "" if here or b0 is None else f"; sweep baseline not shown: timed on {b0.device}"
    table = Table(title=f"per shape (us) on {best.device}; the winner beside the original in one run{note}")
    for col in ("shape", "dtype", "original", "sweep baseline", "best candidate", "copy bound"):
        table.add_column(col, justify="left" if col in ("shape", "dtype") else "right")
    for t in best.timing.shapes:
        b = base.get(repr(sorted(t.dims.items())))
        table.add_row("x".join(str(v) for v in t.dims.values()), t.dtype, _fmt(t.original_us, 2),
                      "-" if b is None else f"{b.best_us:.2f} ({b.speedup:.2f}x)",
                      "-" if t.candidate_us is None else f"{t.candidate_us:.2f} ({t.speedup or 0:.2f}x)",
                      _fmt(copy_bound_us(t, best.timing.copy_ceiling_gbps), 2))
    return table
