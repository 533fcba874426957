#!/usr/bin/env bash
# Run ON THE GPU from the repository root, with carry [".srv", "extracted"] (.srv made by prepare.sh from THIS
# tree: device.sh refuses a stale wheel). After a revision of an op contract, everything that pins its manifest is
# checked again in one call: the shipped patch first (`patches verify ID --record --shapes paper`: the plugin's
# first-call check and the harness at the contract's timed shapes; on success the manifest pin moves), then the
# contract (`validate-contract OP --shapes paper --record`), then the patch kernel's held-out bench with what time
# is left. The updated patch manifest and validation.json go to $OUT with the logs (copy them back by hand).
# Usage: revalidate.sh OP PATCH_ID [SECONDS]   (SECONDS: the whole call's limit, default 560)
set -uo pipefail
OP=${1:?usage: revalidate.sh OP PATCH_ID [SECONDS]}; ID=${2:?usage: revalidate.sh OP PATCH_ID [SECONDS]}
LIMIT=${3:-560}; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
. "$(dirname "$0")/out_limit.sh"  # at most 8 files come back: logs packed
T0=$(date +%s); left() { echo $(( LIMIT - $(date +%s) + T0 )); }
KERNEL=$(ls "patches/$OP/$ID"/kernel.* 2>/dev/null | head -1)
[ -n "$KERNEL" ] || { echo "revalidate: no kernel.* in patches/$OP/$ID"; exit 2; }
SMOKE=0 bash scripts/h200_server/device.sh site > "$OUT/site.log" 2>&1 || { tail -20 "$OUT/site.log"; exit 1; }
export PYTHONPATH=/tmp/srv-site/astra:/tmp/srv-site CUDA_HOME=/usr/local/cuda PYTHONUNBUFFERED=1
export ASTRA_SGLANG_PATCHES_DIR=$PWD/patches  # --record writes this tree's manifest, not the installed wheel's copy
fallback=$(python3 scripts/device/sandbox_probe.py) || echo "revalidate: CUDA did not start in any worker sandbox"
eval "$fallback"
timeout "$(( $(left) / 2 ))" python3 -m astra_sglang patches verify "$ID" --record --shapes paper \
    > "$OUT/verify.log" 2>&1
echo "verify exit $? at $(( $(date +%s) - T0 )) s"; grep -v "^\[" "$OUT/verify.log" | tail -15
cp "patches/$OP/$ID/manifest.json" "$OUT/manifest.recorded.json"
timeout "$(( $(left) * 2 / 3 ))" python3 -m astra_sglang validate-contract "$OP" --shapes all --device cuda \
    --record --json "$OUT/validate.json" --table "$OUT/validate.md" > "$OUT/validate.log" 2>&1
echo "validate-contract exit $? at $(( $(date +%s) - T0 )) s"; tail -3 "$OUT/validate.log"
cp "extracted/$OP/validation.json" "$OUT/" 2>/dev/null
timeout "$(( $(left) - 10 ))" python3 -m astra_sglang bench "$OP" --candidate "$KERNEL" --shapes paper --heldout \
    --json > "$OUT/heldout.json" 2> "$OUT/heldout.log"
echo "held-out bench exit $? at $(( $(date +%s) - T0 )) s"; tail -5 "$OUT/heldout.log"
exit 0
