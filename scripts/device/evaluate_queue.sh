#!/usr/bin/env bash
# Run ON THE H200 from the repository root, with carry [".whl", "extracted", "QUEUE"]: one evaluation pass over
# the queue, then the whole queue folder as $OUT/queue.tar. Every kind of answer comes back (result.json of a
# candidate, baseline.json of a round-0 sweep); a pass that took only result.json once left two runs waiting
# on their sweep (2026-12-02). Here afterwards: `tar xf <files_at>/queue.tar` and `optimize --resume RUN`.
# Usage: evaluate_queue.sh QUEUE [SECONDS]   (SECONDS: stop the pass there, keeping what it finished)
# JOBS=tune: a pass that runs only the originals' sweeps (they run last otherwise and a pass rarely reaches them).
set -uo pipefail
QUEUE=${1:?usage: evaluate_queue.sh QUEUE [SECONDS]}; LIMIT=${2:-540}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
. "$(dirname "$0")/out_limit.sh"  # at most 8 files come back: logs packed
# the sandbox probe's lines (which sandbox CUDA started in) go to stderr: kept in $OUT/site.log for the record
. "$(dirname "$0")/site.sh" 2> >(tee "$OUT/site.log" >&2)
timeout "$LIMIT" python3 -m astra_sglang evaluate "$QUEUE" --jobs "${JOBS:-all}" 2>&1 | tee "$OUT/queue_pass.log"
rc=${PIPESTATUS[0]}
tar cf "$OUT/queue.tar" "$QUEUE"
exit "$rc"
