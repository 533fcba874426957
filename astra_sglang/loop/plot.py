"""A picture of a run for the people who judge it: speedup per round, what failed, the winner.

Written next to the run log (``speedup.png``) when matplotlib is installed (the ``agents`` extra has it).
Only measured geomeans are plotted; a round without timing or without a correct candidate is marked, never
given a bar, so a reader cannot mistake a failed round for a slow one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from astra_sglang.loop.records import RoundRecord, WinnerInfo

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def plot_run(records: list[RoundRecord], winner: WinnerInfo | None, title: str, out: Path,
             label: str | None = None) -> Path | None:
    """Write the plot; None when matplotlib is missing (the run itself never depends on it)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig = speedup_figure(records, winner, title, label)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def speedup_figure(records: list[RoundRecord], winner: WinnerInfo | None, title: str,
                   label: str | None = None) -> Figure:
    """The figure ``plot_run`` saves, returned so what it shows can be read back (matplotlib required)."""
    import matplotlib.pyplot as plt

    rounds = [r for r in sorted(records, key=lambda r: r.round) if r.round > 0]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(rounds) + 2), 3.6))
    for r in rounds:
        win = winner is not None and winner.round == r.round
        if r.correct and r.geomean_speedup is not None:
            ax.bar(r.round, r.geomean_speedup, color="tab:green" if win else "tab:blue")
            ax.annotate(f"{r.geomean_speedup:.2f}x", (r.round, r.geomean_speedup), ha="center", va="bottom",
                        fontsize=8)
        else:
            why = "incorrect" if r.correct is False else ("correct,\nno timing" if r.correct else r.status)
            color = "tab:gray" if r.correct else "tab:red"
            ax.scatter([r.round], [0.05], marker="o" if r.correct else "x", color=color)
            ax.annotate(why, (r.round, 0.1), ha="center", va="bottom", fontsize=7, color=color)
    ax.axhline(1.0, color="gray", linestyle="--", linewidth=1)
    ax.set_xticks([r.round for r in rounds])
    ax.set_xlabel("round")
    ax.set_ylabel("geomean speedup vs original")
    measured = [r.geomean_speedup for r in rounds if r.correct and r.geomean_speedup is not None]
    ax.set_ylim(0, 1.15 * max([1.0, *measured]))
    ax.set_title(title if not label else f"{title}\n{label}", fontsize=9)
    fig.tight_layout()
    return fig
