#!/usr/bin/env bash
# Run ON THE H200 from the repository root, with carry [".srv", "extracted", PATCHES_DIR]: everything a patch from
# a run must pass before it is copied into patches/, in one device call (each call costs a minute to start):
#   1. `validate` against SGLang's server (device.sh validate: tokens, first-call check, served calls);
#   2. the held-out bench of its kernel at paper shapes (`bench OP --candidate F --shapes paper --heldout`),
#      in the same SGLang site (its pydantic; no .whl needed, which would not fit beside .srv in 64 MiB).
# Each step has its own limit so a slow one leaves the other its time; what each wrote is in $OUT.
# Usage: ship_check.sh PATCHES_DIR OP PATCH_ID [validate options...]
#   env: VALIDATE_S (default 330), BENCH_S (default 200), SERVER_ARGS (device.sh's)
set -uo pipefail
PATCHES=${1:?usage: ship_check.sh PATCHES_DIR OP PATCH_ID [validate options...]}; OP=${2:?}; ID=${3:?}; shift 3
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
KERNEL=$(ls "$PATCHES/$OP/$ID"/kernel.* 2>/dev/null | head -1)
[ -n "$KERNEL" ] || { echo "ship_check: no kernel.* in $PATCHES/$OP/$ID"; exit 2; }
export ASTRA_SGLANG_PATCHES_DIR=$PWD/$PATCHES
VALIDATE_S=${VALIDATE_S:-330} bash "$(dirname "$0")/device.sh" validate --expect "$ID" "$@" | tee "$OUT/ship_validate.log"
# device.sh ends with "validate exit N" (its own status is the echo's): N is validate's
v=$(grep -o "^validate exit [0-9]*" "$OUT/ship_validate.log" | tail -1 | awk '{print $3}'); v=${v:-1}
echo "ship_check: validate exit $v"
export PYTHONPATH=/tmp/srv-site/astra:/tmp/srv-site CUDA_HOME=/usr/local/cuda PYTHONUNBUFFERED=1
# the worker's GPU sandbox must let CUDA start (scripts/device/sandbox_probe.py); else the first weaker one that does
fallback=$(python3 scripts/device/sandbox_probe.py) || echo "ship_check: CUDA did not start in any worker sandbox"
eval "$fallback"
timeout "${BENCH_S:-200}" python3 -m astra_sglang bench "$OP" --candidate "$KERNEL" --shapes paper --heldout \
    --json > "$OUT/heldout.json" 2> "$OUT/heldout.log"
b=$?
tail -5 "$OUT/heldout.log"
echo "ship_check: held-out bench exit $b ($OUT/heldout.json)"
[ "$v" = 0 ] && [ "$b" = 0 ]
