"""The one picture of an e2e run: per batch shape, B/A and C/A of the decode step median with their intervals.

Ratios of latencies, so below the dashed line at 1 is faster. A reader sees at once whether B's interval clears 1
and whether the placebo's holds it: the two conditions of a gain. Written when matplotlib is installed (None
otherwise: the run never depends on it).
"""

from __future__ import annotations

from pathlib import Path

from astra_sglang.e2e.runner import E2EReport


def plot_report(report: E2EReport, out: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    shapes = report.shapes
    fig, ax = plt.subplots(figsize=(max(4.5, 1.3 * len(shapes) + 2.5), 3.8))
    for offset, key, name, color in ((-0.12, "b_over_a", "B/A patches on", "tab:blue"),
                                     (0.12, "c_over_a", "C/A placebo", "tab:gray")):
        xs, ys, lo, hi = [], [], [], []
        for i, s in enumerate(shapes):
            iv = getattr(s.decode, key)
            if iv is None:
                continue
            xs.append(i + offset)
            ys.append(iv.ratio)
            lo.append(iv.ratio - iv.low)
            hi.append(iv.high - iv.ratio)
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", capsize=4, color=color, label=name)
    ax.axhline(1.0, color="gray", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(shapes)))
    ax.set_xlim(-0.6, len(shapes) - 0.4)
    ax.set_xticklabels([f"bs {s.batch_size}\n{s.decode.verdict}" for s in shapes], fontsize=8)
    ax.set_ylabel("decode step median ratio (< 1 faster)")
    ax.set_title(f"e2e: {report.verdict} ({report.rounds_done} rounds, 95% bootstrap intervals over processes)",
                 fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
