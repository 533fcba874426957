#!/usr/bin/env bash
# Run ON THE GPU from the repository root, with carry [".srv", "extracted"]: in ONE call, `patches verify ID --record
# --shapes paper` for a patch that has no GPU record yet (record_then_profile.sh's first half), then `e2e --in-process`
# on SGLang's own LLaMA-3-8B forward (random weights, triton attention backend) with the patches PATCHES serving in
# arm B: all arms in one process, decode graphs recaptured per arm-run (astra_sglang/e2e/inprocess_child.py).
# ASTRA_SGLANG_PATCHES_DIR=$PWD/patches: the forward reads the tree's patches, so the record just made is the one that
# serves. Copy $OUT/manifest.recorded.json back into patches/ by hand; the run folder comes back as $OUT/e2e.tar.
# MEM_FRAC (default 0.6): SGLang's --mem-fraction-static. one_batch prefills the whole batch in one forward, so a
# shape needs its KV pool (batch x (IN + OUT_LEN) tokens, 128 KiB each at LLaMA-3-8B dims) beside the 16 GB of
# weights inside the fraction, and that prefill's activations outside it. bs 32 at IN 8160 does not fit an 80 GB
# H100 either way (2026-12-06: out of memory in the prefill at 0.72 and 0.655; 0.6 cannot hold the 34 GB pool);
# bs 24 at 0.6 does. On an H200 (141 GB) bs 32 fits. PREFILL_TOKENS=N (e.g. 32768): e2e --prefill-chunk-tokens N,
# the prefill in groups of requests merged into one decode batch, so bs 32 at IN 8160 needs only its pool (MEM_FRAC
# 0.66 on an H100).
# CONFIG (default llama3-8b): the model's dims, any `astra-sglang profile --config` name (qwen3-30b-a3b for the
# fused-MoE patches: 61 GB of bf16 weights, so an H200, or an H100 at small batches).
# GUARD=1: after the record, `patches guard ID --write` (its guard re-derived from every record, this one included),
# so the e2e serves where the record just measured it winning (a contract revision that adds shapes). COVERAGE=1:
# `patches coverage` of PATCHES at these batch sizes, before the e2e ($OUT/coverage.txt). FRONT=REWRITE_ID (with
# GUARD=1, ID a retune): also `patches guard REWRITE_ID --behind ID --write`, the rewrite's in-front guard re-derived
# from the retune's new record ($OUT/manifest.front.json; copy it back too).
# Usage: [ROUNDS=4 BS="1 32 128" IN=1024 OUT_LEN=32 MEM_FRAC=0.6 PREFILL_TOKENS=0 CONFIG=llama3-8b E2E_S=... GUARD=0 FRONT=
#         COVERAGE=]
#        record_then_e2e.sh ID|- PATCHES [SECONDS]
#   ID "-": no record, the e2e alone. SECONDS: the whole call's limit (default 560).
set -uo pipefail
ID=${1:?usage: record_then_e2e.sh ID|- PATCHES [SECONDS]}; PATCHES=${2:?usage: record_then_e2e.sh ID|- PATCHES [SECONDS]}
LIMIT=${3:-560}; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
. "$(dirname "$0")/out_limit.sh"  # at most 8 files come back: logs packed
T0=$(date +%s); left() { echo $(( LIMIT - $(date +%s) + T0 )); }
export ASTRA_SGLANG_PATCHES_DIR=$PWD/patches
if [ "$ID" != - ]; then  # the record half of record_then_profile.sh (its site set-up, verify --record, the copy)
  PROFILE=0 RECORD_S=${RECORD_S:-200} bash "$(dirname "$0")/record_then_profile.sh" "$ID" || exit $?
  echo "record at $(( $(date +%s) - T0 )) s"
  if [ "${GUARD:-0}" = 1 ]; then  # the guard from every record, this one included: it serves where it just won
    ( export PYTHONPATH=/tmp/srv-site/astra:/tmp/srv-site
      python3 -m astra_sglang patches guard "$ID" --write > "$OUT/guard.txt" 2>&1; echo "guard --write exit $?"
      tail -4 "$OUT/guard.txt" )
    cp "$(ls patches/*/"$ID"/manifest.json | head -1)" "$OUT/manifest.recorded.json"
    if [ -n "${FRONT:-}" ]; then  # a rewrite stacked in front of this retune: where it beats the retune just recorded
      ( export PYTHONPATH=/tmp/srv-site/astra:/tmp/srv-site
        python3 -m astra_sglang patches guard "$FRONT" --behind "$ID" --write >> "$OUT/guard.txt" 2>&1
        echo "guard $FRONT --behind $ID --write exit $?"; tail -4 "$OUT/guard.txt" )
      cp "$(ls patches/*/"$FRONT"/manifest.json | head -1)" "$OUT/manifest.front.json"
    fi
  fi
fi
if [ -n "${COVERAGE:-}" ]; then  # which of PATCHES would serve this forward's calls, said before the e2e (no GPU)
  # on a fresh machine with ID "-" nothing has unpacked the site yet (2026-12-07: "No module named 'pydantic'")
  [ -d /tmp/srv-site/astra ] || SMOKE=0 bash scripts/h200_server/device.sh site > "$OUT/site.log" 2>&1
  ( export PYTHONPATH=/tmp/srv-site/astra:/tmp/srv-site
    python3 -m astra_sglang patches coverage --config "${CONFIG:-llama3-8b}" --batch-size ${BS:-1 32 128} \
      --input-len "${IN:-1024}" --patches "$PATCHES" --attention-backend triton --gpu "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" \
      > "$OUT/coverage.txt" 2>&1; cat "$OUT/coverage.txt" )
fi
BS=${BS:-1 32 128}
CHUNK=(); [ "${PREFILL_TOKENS:-0}" -gt 0 ] && CHUNK=(--prefill-chunk-tokens "$PREFILL_TOKENS")
# shellcheck disable=SC2086  # BS is a list of batch sizes
CONFIG=${CONFIG:-llama3-8b}
STEP=$(( ${E2E_S:-$(left)} - 15 ))
# --timeout inside the step's limit: the forward's batch sizes share what is left and it ends with a report, each
# batch size with rounds (inprocess_child.InProcessAB); a cut once left 8 rounds at bs 32 and 3 at bs 128 (2026-12-07)
STEP_S=$STEP SMOKE=0 MAKE_MODEL="/tmp/$CONFIG $CONFIG" \
  bash scripts/h200_server/device.sh e2e --in-process "${CHUNK[@]}" --out "$OUT/e2e" --patches "$PATCHES" \
  --rounds "${ROUNDS:-4}" --timeout "$(( STEP > 80 ? STEP - 20 : STEP ))" \
  --batch-size $BS --input-len "${IN:-1024}" --output-len "${OUT_LEN:-32}" -- --model-path "/tmp/$CONFIG" \
  --load-format dummy --attention-backend triton --sampling-backend pytorch --dtype bfloat16 \
  --cuda-graph-bs-decode $BS --mem-fraction-static "${MEM_FRAC:-0.6}" --cuda-graph-backend-prefill disabled \
  > "$OUT/e2e.txt" 2> "$OUT/e2e.log"
rc=$?
echo "e2e --in-process exit $rc at $(( $(date +%s) - T0 )) s"; cat "$OUT/e2e.txt"; tail -8 "$OUT/e2e.log"
if [ ! -f "$OUT/e2e.tar" ] && [ -d "$OUT/e2e" ]; then tar cf "$OUT/e2e.tar" -C "$OUT/e2e" .; fi  # a cut run too
rm -rf "$OUT/e2e"
exit 0
