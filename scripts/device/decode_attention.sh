#!/usr/bin/env bash
# Run ON THE H200 from the repository root, with carry [".whl", "extracted"]: issue 23's first GPU steps for SGLang's
# Triton decode attention, in one call: validate the serving-shape contract against the reference on the GPU (all
# shapes, timed: bytes and % of the copy ceiling per shape), then the sweep baseline (`tune`: grouped stage 1,
# num_warps x num_stages x BLOCK_N) on the paper shapes. Results, JSON and logs go to $OUT; the validation record
# and tune_baseline.json are written into extracted/decode_attention here and copied out (bring them back).
# Usage: decode_attention.sh [SECONDS]   (SECONDS: the whole call's limit, default 560)
set -uo pipefail
LIMIT=${1:-560}; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
. "$(dirname "$0")/out_limit.sh"  # at most 8 files come back: logs packed
. "$(dirname "$0")/site.sh"
T0=$(date +%s); left() { echo $(( LIMIT - $(date +%s) + T0 )); }
timeout "$(( $(left) / 3 ))" python3 -m astra_sglang validate-contract decode_attention --shapes all --device cuda \
    --record --json "$OUT/validate.json" --table "$OUT/validate.md" 2>&1 | tee "$OUT/validate.log" | tail -5
echo "validate exit ${PIPESTATUS[0]} at $(( $(date +%s) - T0 )) s"
timeout "$(( $(left) - 15 ))" python3 -m astra_sglang tune decode_attention --shapes paper --json \
    > "$OUT/tune.json" 2> "$OUT/tune.log"
echo "tune exit $? at $(( $(date +%s) - T0 )) s"; tail -5 "$OUT/tune.log"
cp extracted/decode_attention/validation.json extracted/decode_attention/tune_baseline.json "$OUT/" 2>/dev/null
exit 0
