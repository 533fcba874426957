#!/usr/bin/env bash
# Run HERE (no GPU): `astra-sglang validate` against two real SGLang 0.5.23 servers on this CPU host, in a
# Python 3.12 environment shaped like the H200 image (torch 2.11.0+cu130, triton 3.6, transformers 5.17,
# torchvision 0.26) with the archive build_site.sh makes. It checks validate's mechanics against SGLang itself
# (launch, /health, /v1/completions with token ids and logprobs, the plugin's records from every server
# process, teardown); the patches are CUDA-only and refuse here, so it says nothing about them.
# One STAND-IN: SGLang on a non-CUDA device without its CPU engine (which needs a CPU build of sgl_kernel that
# no index has) calls vllm._custom_ops.rotary_embedding; cpu_standin/vllm is a torch version of that one op.
# Usage: cpu_e2e.sh PYTHON3.12_WITH_TORCH_2.11 OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=$1; OUT=$2; mkdir -p "$OUT"
SITE=$OUT/site; rm -rf "$SITE" && mkdir -p "$SITE" && tar xJf .srv/site312.tar.xz -C "$SITE"
"$PY" -m pip install -q --no-deps --no-index --target "$SITE/astra" .srv/astra_sglang-*.whl
export PYTHONPATH=$PWD/scripts/h200_server/cpu_standin:$SITE/astra:$SITE
[ -f "$OUT/model/config.json" ] || "$PY" - "$OUT/model" <<'PY'
import sys
src = open("scripts/h200_server/make_model.py").read()
for a, b in (("hidden_size=4096, intermediate_size=11008", "hidden_size=256, intermediate_size=512"),
             ("num_attention_heads=32, num_key_value_heads=8, head_dim=128",
              "num_attention_heads=4, num_key_value_heads=2, head_dim=64"),
             ('torch_dtype="bfloat16"', 'torch_dtype="float32"'), ("torch.bfloat16", "torch.float32")):
    assert a in src, a
    src = src.replace(a, b)
exec(compile(src, "make_model.py (small, float32)", "exec"))
PY
"$PY" -m astra_sglang validate --workdir "$OUT/validate" --out "$OUT/validate.json" --max-tokens 16 --repeat 1 \
    --load-rounds 2 --concurrency 4 --startup-timeout 900 -- --model-path "$OUT/model" --device cpu \
    --attention-backend torch_native --sampling-backend pytorch --dtype float32 --mem-fraction-static 0.1
