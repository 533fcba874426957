#!/usr/bin/env bash
# Run ON THE GPU from the repository root, with carry [".srv", "extracted"]: `patches verify ID --record --shapes
# paper` for each ID in ONE call (SGLang's site set up once), each record re-deriving that patch's guard per GPU
# from all its records; with FRONT=REWRITE_ID BEHIND=RETUNE_ID after them, `patches guard REWRITE_ID --behind
# RETUNE_ID --write` (the rewrite's in-front guard from both new records). For a guard that cannot see a timed dim
# (decode attention's S) the record also times each guard point of the paper set at S 512 (verify.across_unseen_dims):
# both decode-attention patches were 0.96x / 0.93x there inside their H100 guards (2026-12-07), so re-record both
# on each GPU model.
# Back: $OUT/ID.manifest.json per ID (copy to patches/<op>/ID/manifest.json), $OUT/front.manifest.json, the
# verify logs packed (out_limit.sh). RECORD_S (default 260): each record's limit (decode attention: 16 + 13 shapes).
# ID:twins (`verify --twins-only`): time only the S 512 twins, for a patch whose records already time the paper set on
# this GPU model (half the time: on the H100 both decode-attention patches, done 2026-12-07; on the H200 neither has
# a record of the revised paper set yet, and a point serves on a GPU only where that GPU won it at both ends of S,
# so the rewrite is refused on an H200 until `rerecord.sh mr-da2-single-r1` runs there).
# Usage: [RECORD_S=260] [FRONT=mr-da2-single-r1 BEHIND=sglang-retuned-da] rerecord.sh ID[:twins] [ID[:twins]...]
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: rerecord.sh ID [ID...]"; exit 2; }
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
. "$(dirname "$0")/out_limit.sh"  # at most 8 files come back: logs packed
export ASTRA_SGLANG_PATCHES_DIR=$PWD/patches
SMOKE=0 bash scripts/h200_server/device.sh site > "$OUT/site.log" 2>&1 || { tail -20 "$OUT/site.log"; exit 1; }
export PYTHONPATH=/tmp/srv-site/astra:/tmp/srv-site CUDA_HOME=/usr/local/cuda PYTHONUNBUFFERED=1
fallback=$(python3 scripts/device/sandbox_probe.py) || echo "rerecord: CUDA started in no worker sandbox"
eval "$fallback"
for ARG in "$@"; do
  ID=${ARG%:twins}; TWINS=(); [ "$ARG" != "$ID" ] && TWINS=(--twins-only)
  MANIFEST=$(ls patches/*/"$ID"/manifest.json 2>/dev/null | head -1)
  [ -n "$MANIFEST" ] || { echo "rerecord: no patches/*/$ID/manifest.json"; continue; }
  T0=$(date +%s)
  timeout "${RECORD_S:-260}" python3 -m astra_sglang patches verify "$ID" --record --shapes paper ${TWINS[@]+"${TWINS[@]}"} \
    > "$OUT/verify_$ID.log" 2>&1
  echo "$ID: verify exit $? in $(( $(date +%s) - T0 )) s"; grep -v "^\[" "$OUT/verify_$ID.log" | tail -30
  cp "$MANIFEST" "$OUT/$ID.manifest.json"
done
if [ -n "${FRONT:-}" ] && [ -n "${BEHIND:-}" ]; then
  python3 -m astra_sglang patches guard "$FRONT" --behind "$BEHIND" --write > "$OUT/guard_front.log" 2>&1
  echo "guard $FRONT --behind $BEHIND --write exit $?"; tail -3 "$OUT/guard_front.log"
  cp "$(ls patches/*/"$FRONT"/manifest.json | head -1)" "$OUT/front.manifest.json"
fi
exit 0
