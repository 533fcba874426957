"""The run's plot shows measured speedups only; failed rounds are marked, never drawn as bars."""

from pathlib import Path

import pytest

from astra_sglang.loop.plot import plot_run, speedup_figure
from astra_sglang.loop.records import RoundRecord, WinnerInfo

pytest.importorskip("matplotlib")

RECORDS = [
    RoundRecord(round=0, status="ok", correct=True),
    RoundRecord(round=1, status="build_failed"),
    RoundRecord(round=2, status="incorrect", correct=False),
    RoundRecord(round=3, status="ok", correct=True, geomean_speedup=0.21),
    RoundRecord(round=4, status="ok", correct=True, geomean_speedup=1.89),
    RoundRecord(round=5, status="ok", correct=True),  # correct, no timing (CPU)
]
WINNER = WinnerInfo(round=4, reason="best correct", geomean_speedup=1.89, heldout_ok=True)


def test_bars_only_for_measured_rounds_and_the_winner_stands_out():
    from matplotlib.colors import to_hex
    from matplotlib.patches import Rectangle

    (ax,) = speedup_figure(RECORDS, WINNER, "merge_state", "SCRIPTED candidates").axes
    bars = {round(b.get_x() + b.get_width() / 2): b for b in ax.patches if isinstance(b, Rectangle)}
    assert sorted(bars) == [3, 4]  # rounds 1, 2 and 5 have no measured speedup: no bar
    assert bars[3].get_height() == pytest.approx(0.21) and bars[4].get_height() == pytest.approx(1.89)
    assert to_hex(bars[4].get_facecolor()) == to_hex("tab:green") != to_hex(bars[3].get_facecolor())
    texts = [t.get_text() for t in ax.texts]
    assert "1.89x" in texts and "0.21x" in texts
    assert {"build_failed", "incorrect", "correct,\nno timing"} <= set(texts)  # each failed round says why
    marked = sorted(round(x) for c in ax.collections for x, _ in c.get_offsets())
    assert marked == [1, 2, 5]
    assert [t.get_position()[0] for t in ax.get_xticklabels()] == [1, 2, 3, 4, 5]  # round 0 is the original
    assert ax.get_ylim()[1] >= 1.89 and "SCRIPTED candidates" in ax.get_title()


def test_plot_written_from_real_round_records(tmp_path: Path):
    out = plot_run(RECORDS, WINNER, "merge_state", tmp_path / "run" / "speedup.png", "SCRIPTED candidates")
    assert out is not None and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000
