#!/usr/bin/env bash
# Run ON THE H200 from the repository root, with carry [".srv", "extracted", PATCHES_DIR]: everything a patch from
# a run must pass before it is copied into patches/, in one device call (each call costs a minute to start):
#   1. `validate` against SGLang's server (device.sh validate: tokens, first-call check, served calls);
#   2. the held-out bench of its kernel at paper shapes (`bench OP --candidate F --shapes paper --heldout`),
#      in the same SGLang site (its pydantic; no .whl needed, which would not fit beside .srv in 64 MiB).
# Each step has its own limit so a slow one leaves the other its time; what each wrote is in $OUT.
# Usage: ship_check.sh PATCHES_DIR OP PATCH_ID [validate options...]
#   env: VALIDATE_S (default 330), BENCH_S (default 200; 0 skips the bench), SERVER_ARGS (device.sh's),
#        RECORD=1: first `patches verify ID --record --shapes paper` here, so a patch measured on another GPU model
#        (its guard names the GPUs it won on) serves on this one if it is correct and not slower; the updated
#        manifest is copied to $OUT/manifest.recorded.json (copy it back into patches/ by hand).
# The patched server runs this patch alone (--patches ID): a patch outside `all` (in_all false) is still checked,
# and no other patch's effect is mixed into its tokens or throughput.
set -uo pipefail
PATCHES=${1:?usage: ship_check.sh PATCHES_DIR OP PATCH_ID [validate options...]}; OP=${2:?}; ID=${3:?}; shift 3
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
. "$(dirname "$0")/../device/out_limit.sh"  # at most 8 files come back: logs packed
KERNEL=$(ls "$PATCHES/$OP/$ID"/kernel.* 2>/dev/null | head -1)
[ -n "$KERNEL" ] || { echo "ship_check: no kernel.* in $PATCHES/$OP/$ID"; exit 2; }
export ASTRA_SGLANG_PATCHES_DIR=$PWD/$PATCHES
site_env() { export PYTHONPATH=/tmp/srv-site/astra:/tmp/srv-site CUDA_HOME=/usr/local/cuda PYTHONUNBUFFERED=1; }
if [ "${RECORD:-0}" = 1 ]; then
  SMOKE=0 bash "$(dirname "$0")/device.sh" site || exit 1
  ( site_env; fallback=$(python3 scripts/device/sandbox_probe.py); eval "$fallback"
    timeout "${RECORD_S:-240}" python3 -m astra_sglang patches verify "$ID" --record --shapes paper ) 2>&1 \
      | tee "$OUT/ship_record.log" | grep -v "^\[" | tail -25
  cp "$PATCHES/$OP/$ID/manifest.json" "$OUT/manifest.recorded.json"
fi
VALIDATE_S=${VALIDATE_S:-330} bash "$(dirname "$0")/device.sh" validate --patches "$ID" --expect "$ID" "$@" \
    | tee "$OUT/ship_validate.log"
# device.sh ends with "validate exit N" (its own status is the echo's): N is validate's
v=$(grep -o "^validate exit [0-9]*" "$OUT/ship_validate.log" | tail -1 | awk '{print $3}'); v=${v:-1}
echo "ship_check: validate exit $v"
[ "${BENCH_S:-200}" = 0 ] && { echo "ship_check: held-out bench skipped (BENCH_S=0)"; [ "$v" = 0 ]; exit; }
site_env
# the worker's GPU sandbox must let CUDA start (scripts/device/sandbox_probe.py); else the first weaker one that does
fallback=$(python3 scripts/device/sandbox_probe.py) || echo "ship_check: CUDA did not start in any worker sandbox"
eval "$fallback"
timeout "${BENCH_S:-200}" python3 -m astra_sglang bench "$OP" --candidate "$KERNEL" --shapes paper --heldout \
    --json > "$OUT/heldout.json" 2> "$OUT/heldout.log"
b=$?
tail -5 "$OUT/heldout.log"
echo "ship_check: held-out bench exit $b ($OUT/heldout.json)"
[ "$v" = 0 ] && [ "$b" = 0 ]
