#!/usr/bin/env bash
# Run ON THE GPU from the repository root, with carry [".whl", "extracted"], once the decode-attention contract
# revision has landed (pending/README.md): both halves of the sweep baseline at the shapes SGLang serves, in one call.
# 1. `tune decode_attention --prior` the H100 sweep of the old contract: only the 9 configs that were among some
#    shape's 3 fastest there (about 70 s; tune_baseline.prior.json, for `patches add-retune` here);
# 2. scripts/device/kv_split_policy.py: SGLang's kernel under its kv-split policies (max splits 4..64, dynamic and
#    static) against its default.
# Results, JSON and logs go to $OUT (bring tune_baseline.prior.json back into extracted/decode_attention/).
# Usage: retune_decode_attention.sh [SECONDS]   (SECONDS: the whole call's limit, default 560)
set -uo pipefail
LIMIT=${1:-560}; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PRIOR=docs/measurements/2026-12-06-c/tune_baseline_decode_attention_h100_s1024.json
. "$(dirname "$0")/out_limit.sh"  # at most 8 files come back: logs packed
. "$(dirname "$0")/site.sh"
T0=$(date +%s); left() { echo $(( LIMIT - $(date +%s) + T0 )); }
timeout "$(( $(left) * 2 / 3 ))" python3 -m astra_sglang tune decode_attention --shapes paper --prior "$PRIOR" \
    > "$OUT/tune.log" 2>&1
echo "tune --prior exit $? at $(( $(date +%s) - T0 )) s"; grep -v "^chunk" "$OUT/tune.log" | tail -22
cp extracted/decode_attention/tune_baseline.prior.json "$OUT/" 2>/dev/null
timeout "$(( $(left) - 10 ))" python3 scripts/device/kv_split_policy.py --out "$OUT" > "$OUT/kv.log" 2>&1
echo "kv_split_policy exit $? at $(( $(date +%s) - T0 )) s"; tail -22 "$OUT/kv.log"
exit 0
