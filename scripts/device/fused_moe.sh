#!/usr/bin/env bash
# Run ON THE H200 from the repository root, with carry [".whl", "extracted"] (and QUEUE when given): issue 25's
# first GPU steps for SGLang's two fused-MoE GEMMs, in one call: validate both contracts (fused_moe_kernel: w1;
# fused_moe_down: w2 with the routing weights) on every shape, timed on the largest (bytes and % of the copy
# ceiling), recorded into their folders; then the sweep baseline of SGLang's own tuning space (`tune`, 96 configs at
# the served BLOCK_SIZE_M) on the up-projection's timed set (Qwen3-30B-A3B's decode on this GPU), resumable: a cut
# sweep keeps its finished chunks in tune_baseline.partial.json, which this copies out (bring it back into
# extracted/fused_moe_kernel/ and call again to go on).
# With QUEUE (a model run's evaluation queue, e.g. runs/queue-moe): the pass over that queue takes the sweep's place.
# Its round-0 tune job is the same sweep (kept in the queue item when cut, and written to the op folder's
# tune_baseline.json when done), so one call serves both and the run's bar is the tuned config, not the default.
# The whole queue comes back as queue.tar (`tar xf` it here, then `optimize --resume RUN`).
# Usage: fused_moe.sh [SECONDS] [QUEUE]   (SECONDS: the whole call's limit, default 560)
set -uo pipefail
LIMIT=${1:-560}; QUEUE=${2:-}; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
. "$(dirname "$0")/out_limit.sh"  # at most 8 files come back: logs packed
. "$(dirname "$0")/site.sh"
T0=$(date +%s); left() { echo $(( LIMIT - $(date +%s) + T0 )); }
for op in fused_moe_kernel fused_moe_down; do
  timeout "$(( $(left) / 4 ))" python3 -m astra_sglang validate-contract "$op" --shapes all --device cuda --record \
      --json "$OUT/validate_$op.json" 2>&1 | tee "$OUT/validate_$op.log" | tail -3
  echo "validate $op exit ${PIPESTATUS[0]} at $(( $(date +%s) - T0 )) s"
done
if [ -n "$QUEUE" ]; then
  timeout "$(( $(left) - 20 ))" python3 -m astra_sglang evaluate "$QUEUE" --jobs all > "$OUT/queue_pass.log" 2>&1
  echo "evaluate $QUEUE exit $? at $(( $(date +%s) - T0 )) s"; tail -5 "$OUT/queue_pass.log"
  tar cf "$OUT/queue.tar" "$QUEUE"
else
  timeout "$(( $(left) - 15 ))" python3 -m astra_sglang tune fused_moe_kernel --json \
      > "$OUT/tune.json" 2> "$OUT/tune.log"
  echo "tune exit $? at $(( $(date +%s) - T0 )) s"; tail -5 "$OUT/tune.log"
fi
for op in fused_moe_kernel fused_moe_down; do
  mkdir -p "$OUT/$op"; cp extracted/$op/validation.json extracted/$op/tune_baseline*.json "$OUT/$op/" 2>/dev/null
done
exit 0
