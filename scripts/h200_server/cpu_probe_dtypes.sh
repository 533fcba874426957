#!/usr/bin/env bash
# Run HERE (no GPU), after cpu_e2e.sh: validate's near-tie probes against SGLang's real /generate. Two real SGLang
# 0.5.23 CPU servers of cpu_e2e.sh's model, one float32 and one bfloat16, stand in for "unpatched" and "patched"
# (no patch is involved: bf16 rounding makes their greedy tokens diverge, which is what the probes need), compared
# with `validate --url-off --url-on`. Both with --disable-radix-cache.
# Usage: cpu_probe_dtypes.sh PYTHON3.12_WITH_TORCH_2.11 CPU_E2E_OUT_DIR OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=$1; E2E=$2; OUT=$3; rm -rf "$OUT"; mkdir -p "$OUT"
export PYTHONPATH=$PWD/scripts/h200_server/cpu_standin:$E2E/site/astra:$E2E/site ASTRA_SGLANG_PATCHES=off
A=(--model-path "$E2E/model" --device cpu --attention-backend torch_native --sampling-backend pytorch
   --mem-fraction-static 0.1 --host 127.0.0.1 --disable-radix-cache)
setsid "$PY" -m sglang.launch_server "${A[@]}" --dtype float32 --port 31001 > "$OUT/fp32.log" 2>&1 &
P1=$!
setsid "$PY" -m sglang.launch_server "${A[@]}" --dtype bfloat16 --port 31002 > "$OUT/bf16.log" 2>&1 &
P2=$!
trap 'kill -9 -- -$P1 -$P2 2>/dev/null' EXIT
for port in 31001 31002; do
  for _ in $(seq 600); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 1; done
done
"$PY" -m astra_sglang validate --url-off http://127.0.0.1:31001 --url-on http://127.0.0.1:31002 --max-tokens 16 \
    --repeat 1 --load-rounds 1 --concurrency 4 --out "$OUT/validate.json" > "$OUT/validate.txt" 2> "$OUT/validate.err"
echo "validate exit $?" | tee -a "$OUT/validate.txt"
