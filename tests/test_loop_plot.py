"""The run's plot shows measured speedups only; failed rounds are marked, never drawn as bars."""

from pathlib import Path

import pytest

from astra_sglang.loop.plot import plot_run
from astra_sglang.loop.records import RoundRecord, WinnerInfo

pytest.importorskip("matplotlib")


def test_plot_written_from_real_round_records(tmp_path: Path):
    records = [
        RoundRecord(round=0, status="ok", correct=True),
        RoundRecord(round=1, status="build_failed"),
        RoundRecord(round=2, status="incorrect", correct=False),
        RoundRecord(round=3, status="ok", correct=True, geomean_speedup=0.21),
        RoundRecord(round=4, status="ok", correct=True, geomean_speedup=1.89),
        RoundRecord(round=5, status="ok", correct=True),  # correct, no timing (CPU)
    ]
    winner = WinnerInfo(round=4, reason="best correct", geomean_speedup=1.89, heldout_ok=True)
    out = plot_run(records, winner, "merge_state", tmp_path / "run" / "speedup.png", "SCRIPTED candidates")
    assert out is not None and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000
