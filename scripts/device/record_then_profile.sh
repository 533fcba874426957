#!/usr/bin/env bash
# Run ON THE GPU from the repository root, with carry [".srv", "extracted", ".whl"]: after a contract revision that
# the GPU has already validated (revalidate.sh), in ONE call: `patches verify PATCH_ID --record --shapes paper`
# (moves the patch's manifest pin when it is correct; where it was slower inside its guard, or the GPU is new
# to it, its guard is derived again, per GPU), then profile_ab.sh with
# that recorded manifest. ASTRA_SGLANG_PATCHES_DIR=$PWD/patches makes the servers read the tree's patches (the
# recorded one), and check_wheel.py then leaves the wheel's own patch copies out of its comparison, so the wheel
# built before the record still passes. Copy $OUT/manifest.recorded.json back into patches/ by hand.
# Usage: [PROFILE=0] record_then_profile.sh PATCH_ID [BATCH] [INPUT_LEN] [SECONDS_PER_ARM]   (defaults: 128 1024 140)
set -uo pipefail
ID=${1:?usage: record_then_profile.sh PATCH_ID [BATCH] [INPUT_LEN] [SECONDS_PER_ARM]}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
. "$(dirname "$0")/out_limit.sh"  # at most 8 files come back: logs packed
export ASTRA_SGLANG_PATCHES_DIR=$PWD/patches
MANIFEST=$(ls patches/*/"$ID"/manifest.json 2>/dev/null | head -1)
[ -n "$MANIFEST" ] || { echo "record_then_profile: no patches/*/$ID/manifest.json"; exit 2; }
SMOKE=0 bash scripts/h200_server/device.sh site > "$OUT/site.log" 2>&1 || { tail -20 "$OUT/site.log"; exit 1; }
( export PYTHONPATH=/tmp/srv-site/astra:/tmp/srv-site CUDA_HOME=/usr/local/cuda PYTHONUNBUFFERED=1
  fallback=$(python3 scripts/device/sandbox_probe.py) || echo "record_then_profile: CUDA started in no worker sandbox"
  eval "$fallback"
  timeout "${RECORD_S:-260}" python3 -m astra_sglang patches verify "$ID" --record --shapes paper > "$OUT/verify.log" 2>&1
  echo "verify exit $?"; grep -v "^\[" "$OUT/verify.log" | tail -22 )
cp "$MANIFEST" "$OUT/manifest.recorded.json"
[ "${PROFILE:-1}" = 0 ] && exit 0  # PROFILE=0: the record alone (a call's time kept for the sweep that follows it)
bash "$(dirname "$0")/profile_ab.sh" "$ID" "${2:-128}" "${3:-1024}" "${4:-140}"
