"""A STAND-IN for scripts/h200_server/forward.py (labelled as such: not SGLang, no model, no GPU), for e2e's CPU tests.

It takes one_batch's arguments (--batch-size/--input-len/--output-len, each a list; --result-filename; anything
else ignored), appends one_batch-shaped JSONL lines (``prefill_latency``, ``median_decode_latency`` in seconds, per
batch size) and prints forward.py's ``ASTRA-PATCHES {json}`` line. Its "patch" is recorded through the plugin's
real status module and status file (ASTRA_SGLANG_STATUS_DIR), as the plugin does in a real forward.

Its latencies come from a known distribution: decode step median = 10 ms x (1 + bs/100), prefill = 50 ms x the
same, each times one process-level factor exp(STANDIN_NOISE x z) (default noise 0.03, the H200's 3-6% between
processes). z is not drawn at random but walks the normal distribution's quantiles in a low-discrepancy order (van
der Corput) over the processes in the order e2e numbers them (ASTRA_E2E_ROUND, ASTRA_E2E_ARM): every arm's processes
spread over the whole distribution and no arm is unlucky, so a test's known answer is the answer, every run. Arm B
(patches on, no placebo) is STANDIN_B_FACTOR times A (default 0.9: 10% faster); the placebo serves every call
with the "original", so C is drawn like A.

STANDIN_FAIL="<round>:<arm>" makes that process exit 3 before writing results (a killed or crashed run).
STANDIN_PREFILL_LIMIT=<tokens>: a shape whose prefill forward is over that many tokens dies out of memory, as
one_batch's one-shot prefill of batch 32 at context 8160 did on the H100; with ASTRA_PREFILL_CHUNK_TOKENS (what
``--prefill-chunk-tokens`` sets) the largest forward is one group of whole requests, as the real child groups them.
STANDIN_CLOCKS=1 prints an ``ASTRA-GPU`` line of a stand-in GPU whose SM clock is 1980 MHz over the process factor
(slow processes on low clocks), for e2e's noise finding.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from statistics import NormalDist

from astra_sglang.patches import status, status_file
from astra_sglang.patches.env import patches_requested, placebo_requested

PATCH = "standin-patch"
CALLS_PER_STEP = 4


def van_der_corput(n: int) -> float:
    """The n-th (n >= 1) point of the base-2 van der Corput sequence in (0, 1): 1/2, 1/4, 3/4, 1/8, ..."""
    q, denom = 0.0, 1.0
    while n:
        denom *= 2
        n, bit = divmod(n, 2)
        q += bit / denom
    return q


def one_batch_args() -> argparse.Namespace:
    """The one_batch arguments a stand-in reads (anything else ignored)."""
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, nargs="+", default=[1])
    p.add_argument("--input-len", type=int, nargs="+", default=[1024])
    p.add_argument("--output-len", type=int, nargs="+", default=[16])
    p.add_argument("--result-filename", required=True)
    return p.parse_known_args()[0]


def main() -> None:
    args = one_batch_args()
    rnd, arm = os.environ.get("ASTRA_E2E_ROUND", "0"), os.environ.get("ASTRA_E2E_ARM", "?")
    if os.environ.get("STANDIN_FAIL") == f"{rnd}:{arm}":
        print("stand-in: simulated crash", file=sys.stderr)
        sys.exit(3)
    on, placebo = patches_requested(), placebo_requested()
    k = 3 * (int(rnd) - 1) + "ABC".find(arm) + 1             # round 0: a warm-up, outside the statistics
    z = NormalDist().inv_cdf(van_der_corput(k)) if k >= 1 else 0.0
    process = math.exp(float(os.environ.get("STANDIN_NOISE", "0.03")) * z)
    factor = float(os.environ.get("STANDIN_B_FACTOR", "0.9")) if on and not placebo else 1.0
    st = None
    if on:
        st = status.get(PATCH, "standin_op")
        if placebo:
            st.reason = "placebo (stand-in)"
        else:
            st.state = "active"
            st.first_call_check = "passed (stand-in)"
        status_file.start()
    lines = []
    limit = int(os.environ.get("STANDIN_PREFILL_LIMIT") or 0)
    chunk = int(os.environ.get("ASTRA_PREFILL_CHUNK_TOKENS") or 0)
    for bs in args.batch_size:
        for il in args.input_len:
            largest = max(il, chunk // il * il) if chunk else bs * il
            if limit and min(largest, bs * il) > limit:
                print(f"[rank0]: torch.OutOfMemoryError: CUDA out of memory (stand-in: a prefill of {bs * il} tokens)",
                      file=sys.stderr)
                sys.exit(1)
            for ol in args.output_len:
                base = 1.0 + bs / 100
                lines.append({"run_name": "standin", "batch_size": bs, "input_len": il, "output_len": ol,
                              "prefill_latency": 0.05 * base * factor * process,
                              "median_decode_latency": 0.01 * base * factor * process})
                if st is not None:
                    calls = CALLS_PER_STEP * ol
                    if placebo:
                        st.served_by_original += calls
                    else:
                        st.served_by_patch += calls
    with open(args.result_filename, "a") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    if st is not None:
        print("ASTRA-PATCHES " + json.dumps({PATCH: {"state": st.state, "reason": st.reason,
                                                     "patch": st.served_by_patch, "original": st.served_by_original}}))
    if os.environ.get("STANDIN_CLOCKS") == "1":  # a STAND-IN GPU whose slow processes ran on lower clocks
        sm = round(1980 / process)
        print("ASTRA-GPU " + json.dumps({"gpu": "STAND-IN GPU", "samples": 40, "sm_mhz_median": sm, "sm_mhz_min": sm - 15,
                                         "mem_mhz_median": 3201, "temp_c_max": 52, "power_w_median": 410,
                                         "reasons": ["software power cap"] if process > 1.03 else []}))


if __name__ == "__main__":
    main()
