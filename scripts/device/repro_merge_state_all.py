"""Run ON THE GPU (carry [".whl", "extracted"], after site.sh): where does timing merge_state's original on its
"all" shapes die with "CUDA error: invalid argument"?

2026-12-05 (twice) and 2026-12-07 (twice, once with CUDA_LAUNCH_BLOCKING=1) on the H100, the acceptance test
test_two_bench_runs_agree_within_two_percent[merge_state] failed there: the original alone (no candidate, so no
arena and no cudaHostRegister in the judge), at T 256 NH 128 D 128 (the shape timed after T 16384 NH 7), in
replay_guard._move_window's `t[at].clone()` (a contiguous slice: a device-to-device copy) before a timed replay.
An innocent op raising means either that copy's pointer is bad or an earlier runtime call left its error behind
(cudaGetLastError is sticky until read). This times that shape alone, then the two in the failing order, each in
a fresh judge, and prints each verdict's error; then the order again under compute-sanitizer if it is on PATH.
Usage: python3 scripts/device/repro_merge_state_all.py [--sanitized]
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ALONE = [{"T": 256, "NH": 128, "D": 128}]
ORDER = [{"T": 16384, "NH": 7, "D": 128}, {"T": 256, "NH": 128, "D": 128}]


def run(extra: list[dict[str, int]], label: str) -> None:
    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.harness import evaluate

    # "test" would drop the extras; "paper" times merge_state's paper shapes first, then these
    cfg = EvalConfig(shapes="paper", dtypes=["bfloat16"], timing_dtypes=["bfloat16"], distributions=["normal"],
                     check_all_shapes=False, extra_timed_shapes=extra, time_baselines=False, rep=50)
    r = evaluate(REPO / "extracted" / "merge_state", None, cfg)
    f = r.correctness.first_failure if r.correctness else None
    print(f"{label}: ok={r.ok} error={(r.error or '')[:200]!r} at={f.dims if f else None}", flush=True)


if __name__ == "__main__":
    if "--sanitized" in sys.argv:
        run(ORDER, "in order, sanitized")
        sys.exit(0)
    run(ALONE, "T 256 NH 128 alone")
    run(ORDER, "T 16384 NH 7 then T 256 NH 128")
    if shutil.which("compute-sanitizer"):
        subprocess.run(["compute-sanitizer", "--target-processes", "all", "--print-limit", "5", sys.executable,
                        __file__, "--sanitized"], timeout=400, check=False)
