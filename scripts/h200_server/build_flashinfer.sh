#!/usr/bin/env bash
# Run HERE (the CPU host, which has a package index): builds .srv/flashinfer072.tar.xz, the part of FlashInfer
# 0.7.2 (the version SGLang 0.5.23 pins) that `--attention-backend flashinfer` needs on the H200, for
# `FLASHINFER=1 device.sh ...`. The wheel is 65 MB compressed and 593 MB installed, over the 64 MiB carry limit;
# what the attention backend imports and JIT-compiles is much less:
#   - every .py of the package (7.8 MB): `import flashinfer` and its decode/prefill/cascade/page modules import
#     with cutlass-dsl, cudnn-frontend, cuda-tile and nccl4py absent, as on the H200 image (checked on CPU with
#     those packages hidden);
#   - data/csrc's top-level sources and templates (the batch decode/prefill/attention JIT sources; the
#     subfolders are other kernel families), data/include, data/spdlog;
#   - CUTLASS's headers (the sm90 FA3 prefill is CuTe) and the bundled CCCL: FlashInfer's headers use
#     cuda::fast_mod_div, which nvcc 13.0's own CCCL lacks (a decode module failed to compile without it).
# About 12 MB. With it, nvcc 13.0 compiled the bf16 head-dim-128 batch decode, FA2 and FA3 prefill JIT modules on
# the CPU host (FA3 includes curand_kernel.h: the toolkit's, or the nvidia-curand wheel's on CPATH).
# A test rig of this lab, like site312.tar.xz: a user's H200 installs flashinfer-python itself.
# Usage: scripts/h200_server/build_flashinfer.sh [python3]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
PY=${1:-python3}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$PY" -m pip download -q --no-deps -d "$W" flashinfer-python==0.7.2
(cd "$W" && unzip -q flashinfer_python-0.7.2-*.whl -d pkg)
cd "$W/pkg"
{
  find flashinfer -path flashinfer/data -prune -o -name "*.py" -print
  find flashinfer/data -maxdepth 1 -name "*.py"
  find flashinfer/data/csrc -maxdepth 1 -type f
  find flashinfer/data/include flashinfer/data/spdlog flashinfer/data/cutlass/include \
       flashinfer/data/cutlass/tools/util/include flashinfer/data/cccl/cub flashinfer/data/cccl/libcudacxx/include \
       flashinfer/data/cccl/thrust -type f
  find flashinfer_python-0.7.2.dist-info -type f
} | grep -v __pycache__ | sort > "$W/files.txt"
mkdir -p "$ROOT/.srv"
tar cJf "$ROOT/.srv/flashinfer072.tar.xz" -T "$W/files.txt"
ls -la "$ROOT/.srv/flashinfer072.tar.xz"
