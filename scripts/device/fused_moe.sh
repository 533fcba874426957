#!/usr/bin/env bash
# Run ON THE H200 from the repository root, with carry [".whl", "extracted"]: issue 25's first GPU steps for SGLang's
# two fused-MoE GEMMs, in one call: validate both contracts (fused_moe_kernel: w1; fused_moe_down: w2 with the routing
# weights) on every shape, timed on the largest (bytes and % of the copy ceiling), recorded into their folders; then
# the sweep baseline of SGLang's own tuning space (`tune`, 96 configs at the served BLOCK_SIZE_M) on the decode shapes
# of the up-projection, resumable: a cut sweep keeps its finished chunks in tune_baseline.partial.json, which this
# copies out (bring it back into extracted/fused_moe_kernel/ and call again to go on).
# Usage: fused_moe.sh [SECONDS]   (SECONDS: the whole call's limit, default 560)
set -uo pipefail
LIMIT=${1:-560}; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
. "$(dirname "$0")/out_limit.sh"  # at most 8 files come back: logs packed
. "$(dirname "$0")/site.sh"
T0=$(date +%s); left() { echo $(( LIMIT - $(date +%s) + T0 )); }
for op in fused_moe_kernel fused_moe_down; do
  timeout "$(( $(left) / 4 ))" python3 -m astra_sglang validate-contract "$op" --shapes all --device cuda --record \
      --json "$OUT/validate_$op.json" --table "$OUT/validate_$op.md" 2>&1 | tee "$OUT/validate_$op.log" | tail -3
  echo "validate $op exit ${PIPESTATUS[0]} at $(( $(date +%s) - T0 )) s"
done
timeout "$(( $(left) - 15 ))" python3 -m astra_sglang tune fused_moe_kernel --shapes decode --json \
    > "$OUT/tune.json" 2> "$OUT/tune.log"
echo "tune exit $? at $(( $(date +%s) - T0 )) s"; tail -5 "$OUT/tune.log"
for op in fused_moe_kernel fused_moe_down; do
  mkdir -p "$OUT/$op"; cp extracted/$op/validation.json extracted/$op/tune_baseline*.json "$OUT/$op/" 2>/dev/null
done
exit 0
