#!/usr/bin/env bash
# Run ON THE H200 from the repository root, with carry [".whl", "extracted"]: `pytest -m gpu` on the named test
# files (default: all), one line per test as it ends (-v), so a call cut by its limit still says which tests
# passed; JUnit XML and what the acceptance tests measured go to $OUT. A -q run cut at 300 s once came back as
# four dots and no names (2026-12-02). CPU-only test modules that import what the device lacks (openai-agents)
# fail collection there; --continue-on-collection-errors keeps them from stopping the GPU tests (2026-12-05).
# Each failure's traceback goes to $OUT/failures.log as the test ends (failures_now.py), and the measurements come
# back as one tar: a call returns at most a few files, and a cut run never printed its summary (2026-12-05).
# Usage: gpu_tests.sh [SECONDS] [pytest args...]   (SECONDS: the whole run's limit, default 540)
set -uo pipefail
LIMIT=${1:-540}; shift || true
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/measurements"
. "$(dirname "$0")/out_limit.sh"  # at most 8 files come back: logs packed
. "$(dirname "$0")/site.sh"
export ASTRA_SGLANG_MEASUREMENTS="$OUT/measurements" ASTRA_SGLANG_FAILURES="$OUT/failures.log"
export PYTHONPATH="$(cd "$(dirname "$0")" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
timeout "$LIMIT" python3 -m pytest -m gpu -v -p no:cacheprovider -p failures_now --continue-on-collection-errors --junitxml="$OUT/gpu_tests.xml" "${@:-tests}" 2>&1 \
    | tee "$OUT/gpu_tests.log" | grep -E "PASSED|FAILED|ERROR|SKIPPED|XFAIL|passed|failed"
rc=${PIPESTATUS[0]}
tar cf "$OUT/measurements.tar" -C "$OUT" measurements && rm -rf "$OUT/measurements"
exit "$rc"
