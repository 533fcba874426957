#!/usr/bin/env bash
# Run ON THE H200 from the repository root, with .srv carried: site312.tar.xz (build_site.sh) and astra-sglang's
# wheel (`pip wheel --no-deps -w .srv .` from a clean tree: a stale build/ leaks deleted patches into it).
# Steps: unpack the SGLang runtime into /tmp/srv-site (kept while the machine stays warm), build the torch-2.11
# shim for sgl_kernel, refuse a wheel that is not this tree (check_wheel.py), install astra-sglang beside it (its
# entry point is what SGLang's load_plugins finds), check sgl_kernel's kernels against torch, make a
# random-weights LLaMA, then `astra-sglang validate`.
# SERVER_ARGS: extra launch_server arguments (default --disable-radix-cache: a clean floor, docs/patches.md says why).
# Usage: device.sh [site|smoke|validate|forward|profile|e2e] [that step's options...]   Results go to $OUT.
# site: only the set-up above (for a command that runs `python3 -m astra_sglang ...` in this site afterwards).
# profile/e2e: `astra-sglang profile|e2e` with the options given (server arguments after `--`); their stdout is the
# command's own (set-up lines go to stderr), so `device.sh profile ... --json > F` keeps F clean.
# Environment: STEP_S (profile/e2e: stop there, keep the files), MAKE_MODEL="DIR NAME" (make_model.py first),
# E2E_RESUME (e2e: a carried run-folder tar to go on with, below),
# SMOKE=0 (skip the once-per-machine smoke: only for a site archive that passed it before), FLASHINFER=1 (below).
set -uo pipefail
STEP=${1:-validate}; shift || true
case "$STEP" in profile|e2e) exec 3>&1 1>&2 ;; *) exec 3>&1 ;; esac  # fd 3: the step's own stdout
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SITE=/tmp/srv-site
export CUDA_HOME=/usr/local/cuda PYTHONUNBUFFERED=1 SGLANG_CACHE_DIR=/tmp/sgl-cache TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ ! -f $SITE/.ready ]; then
  rm -rf $SITE && mkdir -p $SITE && tar xJf .srv/site312.tar.xz -C $SITE || exit 1
  TL=$(python3 -c "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))")
  ${CXX:-g++} -std=c++17 -O2 -fPIC -shared -o $SITE/libsgl_kernel_torch211_shim.so $SITE/sgl_kernel_torch211_shim.cpp \
      -L$TL -lc10 -lc10_cuda -ltorch_cpu -Wl,-rpath,$TL || exit 1
  touch $SITE/.ready
fi
# the sgl_kernel ops rebuilt for torch 2.11 (sgl_kernel_torch211_ops.cu says why), built once per machine
cp scripts/h200_server/sitecustomize.py scripts/h200_server/sgl_kernel_torch211_ops.cu \
   scripts/h200_server/sgl_kernel_torch211_ops.py scripts/h200_server/cutedsl_dual_gemm_sm90.py $SITE/
rm -rf $SITE/flashinfer_include && cp -r extracted/fused_add_rmsnorm/baseline_src/include $SITE/flashinfer_include || exit 1
export TORCH_EXTENSIONS_DIR=/tmp/torch-ext TORCH_CUDA_ARCH_LIST=9.0
python3 scripts/h200_server/check_wheel.py .srv/astra_sglang-*.whl . || exit 1  # a stale wheel measures nothing
rm -rf $SITE/astra && python3 -m pip install -q --no-deps --no-index --target $SITE/astra .srv/astra_sglang-*.whl \
    > $OUT/pip-astra.log 2>&1 || { tail -20 $OUT/pip-astra.log; exit 1; }
# FLASHINFER=1: FlashInfer 0.7.2's attention part (.srv/flashinfer072.tar.xz, build_flashinfer.sh) importable too,
# for --attention-backend flashinfer; its JIT builds are kept in /tmp/fiws while the machine stays warm. Off by
# default: with flashinfer importable SGLang may route other ops to it, and earlier triton-backend runs had none.
FI=
if [ "${FLASHINFER:-0}" = 1 ]; then
  if [ ! -f /tmp/srv-fi/.ready ]; then
    rm -rf /tmp/srv-fi && mkdir -p /tmp/srv-fi && tar xJf .srv/flashinfer072.tar.xz -C /tmp/srv-fi \
        && touch /tmp/srv-fi/.ready || { echo "FLASHINFER=1: carry .srv/flashinfer072.tar.xz (build_flashinfer.sh)"; exit 1; }
  fi
  export FLASHINFER_WORKSPACE_BASE=/tmp/fiws FLASHINFER_CUDA_ARCH_LIST=9.0a
  FI=:/tmp/srv-fi
fi
export PYTHONPATH=$SITE/astra:$SITE$FI
# The first import builds the torch-2.11 ops (kept in /tmp/torch-ext) and proves the site loads; it costs ~35 s even
# when nothing is built (2026-12-06, H100: 31-39 s in each of seven calls on one warm machine), so a machine that
# passed it with these same ops sources and path skips it: every SGLang process imports sgl_kernel anyway.
OPS_KEY="$(cat scripts/h200_server/sgl_kernel_torch211_ops.cu scripts/h200_server/sgl_kernel_torch211_ops.py \
    scripts/h200_server/sitecustomize.py | md5sum | cut -c1-16)$FI"
if [ "$(cat $SITE/.ops_ok 2>/dev/null)" = "$OPS_KEY" ]; then
  echo "sgl_kernel imported with these torch-2.11 ops before on this machine: not imported again here"
else
  T0=$(date +%s); python3 -c "import sgl_kernel" > $OUT/ops-build.log 2>&1 || { tail -30 $OUT/ops-build.log; exit 1; }
  echo "sgl_kernel imported with the torch-2.11 ops in $(( $(date +%s) - T0 )) s"
  echo "$OPS_KEY" > $SITE/.ops_ok
fi
[ "$STEP" = site ] && exit 0
# SMOKE=0 skips the once-per-machine smoke (only when the same site archive passed it before: it costs a minute)
if [ "$STEP" = smoke ] || { [ ! -f $SITE/.smoked ] && [ "${SMOKE:-1}" != 0 ]; }; then  # the site and ops do not change
  python3 scripts/h200_server/smoke.py 2>&1 | tee $OUT/smoke.log | tail -25
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "smoke failed: no server run"; exit 1; }
  touch $SITE/.smoked
fi
[ "$STEP" = smoke ] && exit 0
if [ "$STEP" = profile ] || [ "$STEP" = e2e ]; then
  # MAKE_MODEL="DIR NAME": a config-only model folder (make_model.py) for --model-path DIR --load-format dummy
  if [ -n "${MAKE_MODEL:-}" ] && [ ! -f "${MAKE_MODEL%% *}/config.json" ]; then
    python3 scripts/h200_server/make_model.py $MAKE_MODEL > $OUT/make_model.log 2>&1 || { tail -20 $OUT/make_model.log; exit 1; }
  fi
  # E2E_RESUME=F.tar (carried): an e2e run folder that an earlier call sent back, unpacked as $OUT/e2e so that
  # `--out $OUT/e2e` with the same arguments resumes it (more rounds over several calls; e2e refuses a folder
  # whose processes ran on another GPU model: name nvidia-h100-x1 to stay on one)
  if [ -n "${E2E_RESUME:-}" ]; then mkdir -p "$OUT/e2e" && tar xf "$E2E_RESUME" -C "$OUT/e2e" || exit 1; fi
  # STEP_S: stop the step there and still return its files. The device returns $OUT's files only a few folders
  # deep: an e2e run folder (r001/A/...) came back empty (2026-12-04), so each one under $OUT goes back as a tar.
  timeout "${STEP_S:-86400}" python3 -m astra_sglang "$STEP" "$@" 1>&3
  rc=$?
  for d in "$OUT"/*/; do [ -f "$d/e2e.json" ] && tar cf "${d%/}.tar" -C "$d" . && echo "run folder: ${d%/}.tar"; done
  exit $rc
fi
if [ "$STEP" = forward ]; then  # SGLang's own forward (one_batch) after load_plugins: forward.py; arguments: one_batch's
  [ -f /tmp/llama3-8b/config.json ] || python3 scripts/h200_server/make_model.py /tmp/llama3-8b llama3-8b \
      > $OUT/make_config.log 2>&1 || { tail -20 $OUT/make_config.log; exit 1; }
  timeout ${FORWARD_S:-420} python3 scripts/h200_server/forward.py --model-path /tmp/llama3-8b --load-format dummy \
      --attention-backend triton --sampling-backend pytorch --dtype bfloat16 "$@" 2>&1 | tee $OUT/forward.log \
      | grep -v "^\[.*Capturing\|it/s\]" | tail -40
  exit "${PIPESTATUS[0]}"
fi
# MAX_POS: the model's context length (make_model.py; default 4096), e.g. 16384 for prompts of 8k tokens
MODEL=/tmp/model${MAX_POS:+-$MAX_POS}
[ -f $MODEL/config.json ] || python3 scripts/h200_server/make_model.py $MODEL ${LAYERS:-4} > $OUT/make_model.log 2>&1 \
    || { tail -20 $OUT/make_model.log; exit 1; }
tail -1 $OUT/make_model.log 2>/dev/null
python3 scripts/h200_server/logit_gaps.py $MODEL 2>&1 | tail -1 | tee $OUT/logit_gaps.log
timeout ${VALIDATE_S:-450} python3 -m astra_sglang validate --workdir $OUT/validate --out $OUT/validate.json "$@" \
    -- --model-path $MODEL --attention-backend triton --sampling-backend pytorch --cuda-graph-max-bs-decode 16 \
       --dtype bfloat16 --log-level info ${SERVER_ARGS---disable-radix-cache} 2>&1 | tee $OUT/validate.log | tail -60
echo "validate exit ${PIPESTATUS[0]}"
