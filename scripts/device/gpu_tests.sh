#!/usr/bin/env bash
# Run ON THE H200 from the repository root, with carry [".whl", "extracted"]: `pytest -m gpu` on the named test
# files (default: all), one line per test as it ends (-v), so a call cut by its limit still says which tests
# passed; JUnit XML and what the acceptance tests measured go to $OUT. A -q run cut at 300 s once came back as
# four dots and no names (2026-12-02). CPU-only test modules that import what the device lacks (openai-agents)
# fail collection there; --continue-on-collection-errors keeps them from stopping the GPU tests (2026-12-05).
# Each failure's traceback goes to $OUT/failures.log as the test ends (failures_now.py), and the measurements come
# back as one tar: a call returns at most a few files, and a cut run never printed its summary (2026-12-05).
# GPU tests whose verdict rests on no timing run first, GPU_JOBS (default 4) at once (pytest-xdist, in the device
# image): the 19 contract validations and the sandbox, screen and status tests spend their time compiling and in
# float64 references on the host; those marked gpu_timing run after them, one at a time, with the GPU to
# themselves. GPU_JOBS=1: every GPU test one at a time, as before.
# Carry .whl made with AGENTS=1 (wheels.sh) so the modules that import openai-agents are collected and their GPU
# tests run. SGLANG_SITE=1, with .srv carried (site312.tar.xz and this tree's wheel, prepare.sh): SGLang's runtime
# on the path too (device.sh site), so the GPU tests that compare with the installed SGLang run instead of skipping.
# PASSED_IN="FILE...": leave out the tests an earlier run passed (its JUnit XML, or its -v log when the call was cut:
# passed_ids.py), so a suite longer than one call goes on where the last call stopped.
# GPU_TEST_TIMEOUT (default 400): the limit of one test, in seconds (pytest-timeout; it fails, the run goes on).
# Usage: gpu_tests.sh [SECONDS] [pytest args...]   (SECONDS: the whole run's limit, default 540)
set -uo pipefail
LIMIT=${1:-540}; shift || true
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/measurements"
. "$(dirname "$0")/out_limit.sh"  # at most 8 files come back: logs packed
# the limit counts from here: the set-up below (SGLang's site, ~60 s) once pushed a 570-s run past the call's 600
T0=$(date +%s); left() { echo $(( LIMIT - $(date +%s) + T0 )); }
. "$(dirname "$0")/site.sh"
if [ "${SGLANG_SITE:-0}" = 1 ]; then
  if SMOKE=0 bash scripts/h200_server/device.sh site > "$OUT/site_sglang.log" 2>&1; then
    export PYTHONPATH=$PYTHONPATH:/tmp/srv-site/astra:/tmp/srv-site CUDA_HOME=/usr/local/cuda
  else
    echo "gpu_tests.sh: no SGLang site (carry .srv from prepare.sh): the tests that need SGLang skip"; tail -5 "$OUT/site_sglang.log"
  fi
fi
python3 -c "import agents" 2>/dev/null || echo "gpu_tests.sh: no openai-agents (AGENTS=1 scripts/device/wheels.sh): 3 modules will not be collected"
export ASTRA_SGLANG_MEASUREMENTS="$OUT/measurements" ASTRA_SGLANG_FAILURES="$OUT/failures.log"
export PYTHONPATH="$(cd "$(dirname "$0")" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
DESELECT=()
if [ -n "${PASSED_IN:-}" ]; then
  # shellcheck disable=SC2086  # PASSED_IN is a list of files
  while IFS= read -r id; do [ -n "$id" ] && DESELECT+=(--deselect "$id"); done \
      < <(python3 "$(dirname "$0")/passed_ids.py" $PASSED_IN)
  echo "gpu_tests.sh: leaving out $(( ${#DESELECT[@]} / 2 )) tests that passed in: $PASSED_IN"
fi
JOBS=${GPU_JOBS:-4}
# one test that hangs must not take the call: the quiet-worker GPU test ran past a 470-s call without a line
# (2026-12-06); the slowest GPU test that passed took 327 s (a contract validation under 4 jobs, 2026-12-06-e)
PER_TEST=${GPU_TEST_TIMEOUT:-400}
python3 -c "import xdist" 2>/dev/null || JOBS=1
phase() {  # MARKER_EXPRESSION JUNIT_FILE [pytest args...]; exit status 5 (nothing selected) counts as 0
  local expr=$1 xml=$2; shift 2
  [ "$(left)" -gt 5 ] || { echo "gpu_tests.sh: no time left for: -m '$expr'"; return 124; }
  timeout "$(left)" python3 -m pytest -m "$expr" -v -p no:cacheprovider -p failures_now --timeout "$PER_TEST" \
      --continue-on-collection-errors --junitxml="$OUT/$xml" ${DESELECT[@]+"${DESELECT[@]}"} "$@" 2>&1 \
    | tee -a "$OUT/gpu_tests.log" | grep -E "PASSED|FAILED|ERROR|SKIPPED|XFAIL|passed|failed|no tests ran"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 5 ] && rc=0
  return "$rc"
}
if [ "$JOBS" -gt 1 ]; then
  phase "gpu and not gpu_timing" gpu_tests.xml -n "$JOBS" "${@:-tests}"; rc1=$?
  phase "gpu and gpu_timing" gpu_tests_timing.xml "${@:-tests}"; rc2=$?
else
  phase "gpu" gpu_tests.xml "${@:-tests}"; rc1=$?; rc2=0
fi
tar cf "$OUT/measurements.tar" -C "$OUT" measurements && rm -rf "$OUT/measurements"
[ "$rc1" = 0 ] && exit "$rc2"
exit "$rc1"
