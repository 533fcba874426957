"""What the patches' kernel records forecast for the decode step, set beside what the e2e measured.

Why: a patch's record times its kernel against the one SGLang serves, per shape, in the harness; the e2e times the
whole step. On 2026-12-07 (H100, stop 57) the two agreed at every batch the e2e ran: 32 calls a step times each
call's saving at the records' nearest shape forecast B/A 0.957 / 0.991 / 0.873 / 0.833 (bs 1 / 32 / 128 at context
1024, bs 32 at 8160), and every one lay inside the measured interval. A step that misses its forecast says the
forward is not running what was timed (a patch serving fewer calls, another layout or form of the call, costs
outside the kernel), which a gain or no-change verdict alone does not say. The forecast never changes the verdict.

The forecast is written before the run (``FORECAST_FILE`` in the run folder, from ``patches coverage``'s rows) and
checked when the report is built, so ``--report-only`` shows it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import Field

from astra_sglang.contract.base import Model, write_atomic
from astra_sglang.e2e.stats import Interval
from astra_sglang.profile.coverage import StepSaving

FORECAST_FILE = "forecast.json"
MISS = "the forward is not running what the records timed, or not only that"


class Forecasts(Model):
    """The run folder's forecast: per batch shape, the kernel time a decode step should lose (``patches
    coverage``'s ``step_savings``), from the records of the GPU the run runs on."""

    gpu: str
    steps: list[StepSaving]


class ForecastCheck(Model):
    """A forecast beside the measured decode B/A of its batch shape."""

    batch_size: int
    input_len: int | None = None
    output_len: int | None = None
    saved_us: float
    step_ms: float = Field(description="arm A's decode step median the forecast is taken from")
    predicted: float = Field(description="B/A forecast: (A - saved) / A")
    measured: Interval | None = None
    holds: bool | None = Field(default=None, description="the measured B/A interval holds the forecast (None: "
                                                         "no interval)")
    parts: list[str] = Field(default_factory=list)
    uncounted: list[str] = Field(default_factory=list)

    def text(self) -> str:
        got = f"measured {self.measured.text()}" if self.measured else "no measured interval"
        verdict = "" if self.holds is None else (": holds it" if self.holds else
                                                 f": MISSES it ({MISS})")
        extra = f"; not counted: {'; '.join(self.uncounted)}" if self.uncounted else ""
        return (f"{self.shape()}: the kernel records forecast B/A {self.predicted:.3f} ({self.saved_us:,.0f} us "
                f"off A's {self.step_ms:.3f} ms step), {got}{verdict}{extra}")

    def shape(self) -> str:
        return shape_label(self.batch_size, self.input_len, self.output_len)


def shape_label(batch_size: int, input_len: int | None, output_len: int | None) -> str:
    """One way to name a batch shape in every line the run prints, so the forecast said before the run, its verdict
    and the report's reasons can be matched by eye (a forecast file from before lengths names the batch alone)."""
    lengths = f" (in {input_len}, out {output_len})" if input_len is not None else ""
    return f"bs {batch_size}{lengths}"


def write_forecasts(out: Path, forecasts: Forecasts) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / FORECAST_FILE, forecasts.model_dump_json(indent=2))


def read_forecasts(out: Path) -> tuple[list[StepSaving], str | None]:
    """The run folder's forecasts; none where it has no file (a run from before forecasts, a Hub model id without a
    local config): the report then says nothing about them. A file this version cannot read (one written before
    forecasts were kept per batch shape, 2026-12-07) is named in the second item, so the report says its forecast
    went unjudged instead of dropping it without a word."""
    path = out / FORECAST_FILE
    if not path.is_file():
        return [], None
    try:
        return Forecasts.model_validate_json(path.read_text()).steps, None
    except ValueError as e:
        return [], f"{path} is not a forecast this version reads, so no forecast was judged ({str(e).splitlines()[0]})"


def check(forecasts: Sequence[StepSaving],
          decode: dict[tuple[int, int, int], tuple[float | None, Interval | None]]) -> list[ForecastCheck]:
    """Each forecast beside the shape it was made for: ``decode[(batch, input_len, output_len)] = (arm A's median
    step in seconds, the B/A interval)``. A forecast from before forecasts named their lengths stands for its batch
    size's one shape, and for none where the run measured several (2026-12-07: a forecast made at the first prompt
    length was judged against the last one's step). A shape without an A median is left out."""
    out = []
    for f in forecasts:
        keys = [k for k in decode if k[0] == f.batch_size and f.input_len in (None, k[1])
                and f.output_len in (None, k[2])]
        if len(keys) != 1 or not (f.parts or f.uncounted):
            continue
        (key,) = keys
        a, interval = decode[key]
        if not a:
            continue
        predicted = (a * 1e6 - f.saved_us) / (a * 1e6)
        holds = None if interval is None else interval.low <= predicted <= interval.high
        out.append(ForecastCheck(batch_size=f.batch_size, input_len=f.input_len, output_len=f.output_len,
                                 saved_us=f.saved_us, step_ms=a * 1e3, predicted=predicted, measured=interval,
                                 holds=holds, parts=f.parts, uncounted=f.uncounted))
    return out
