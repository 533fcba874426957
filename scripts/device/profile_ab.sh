#!/usr/bin/env bash
# Run ON THE GPU from the repository root, with carry [".srv", "extracted", ".whl"]: SGLang's own forward profiled
# twice at one decode shape, patches off then PATCHES on (the same arguments, the same machine), and the two traces
# compared per op and group (`profile --compare`): where the e2e's missing share of a patch's bench saving goes
# (decode attention at batch 128 realised 76% of it on the H100, 2026-12-05-e). LLaMA-3-8B dimensions, dummy
# weights, triton backend, bf16. Hot lists, compare table and traces go to $OUT.
# Usage: [MEM=0.7] [BACKEND_OFF=flashinfer] profile_ab.sh PATCHES [BATCH] [INPUT_LEN] [SECONDS_PER_ARM]
# (defaults: 128 1024 200). MEM 0.8 ran out of memory in the 131k-token prefill of batch 128 x 1024 on an H100
# (2026-12-06). BACKEND_OFF: the patches-off arm's --attention-backend (default triton, the same server); with
# flashinfer (issue 21: FlashInfer's decode beside SGLang's Triton kernel and the patches that replace it) carry
# .srv/flashinfer072.tar.xz (scripts/h200_server/build_flashinfer.sh) and both arms get FlashInfer importable
# (FLASHINFER=1), so they differ in the backend and the patches only. Its first run JIT-builds FlashInfer's
# decode and prefill modules (kept in /tmp/fiws while the machine stays warm): give that arm time.
set -uo pipefail
PATCHES=${1:?usage: profile_ab.sh PATCHES [BATCH] [INPUT_LEN] [SECONDS_PER_ARM]}; BS=${2:-128}; IN=${3:-1024}
ARM_S=${4:-200}; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
. "$(dirname "$0")/out_limit.sh"  # at most 8 files come back: logs packed
export SMOKE=${SMOKE:-0}
OFF_BACKEND=${BACKEND_OFF:-triton}
[ "$OFF_BACKEND" = flashinfer ] && export FLASHINFER=1
for arm in off "$PATCHES"; do
  name=$([ "$arm" = off ] && echo off || echo on)
  backend=$([ "$arm" = off ] && echo "$OFF_BACKEND" || echo triton)
  ASTRA_SGLANG_PATCHES=$arm STEP_S=$ARM_S bash scripts/h200_server/device.sh profile --config llama3-8b \
      --out "/tmp/prof-$name" --batch-size "$BS" --input-len "$IN" --output-len 16 --phase decode --steps 2 --json \
      -- --attention-backend "$backend" --sampling-backend pytorch --dtype bfloat16 --cuda-graph-max-bs-decode "$BS" \
      --mem-fraction-static "${MEM:-0.7}" --cuda-graph-backend-prefill disabled > "$OUT/hot_$name.json" 2> "$OUT/profile_$name.log"
  echo "profile $name (--attention-backend $backend, ASTRA_SGLANG_PATCHES=$arm): exit $?"; tail -2 "$OUT/profile_$name.log"
done
traces=()
for name in off on; do
  t=$(find "/tmp/prof-$name" -name "*batch${BS}_*decode*.trace.json*" | head -1)
  [ -n "$t" ] && cp "$t" "$OUT/${name}_$(basename "$t")" && traces+=(--trace "$OUT/${name}_$(basename "$t")")
done
[ ${#traces[@]} = 4 ] || { echo "profile_ab.sh: a trace is missing (${#traces[@]} of 4 arguments)"; exit 1; }
PYTHONPATH=/tmp/srv-site/astra:/tmp/srv-site python3 -m astra_sglang profile --compare --steps 2 --batch-size "$BS" \
    --phase decode "${traces[@]}" | tee "$OUT/compare.txt"
