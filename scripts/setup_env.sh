#!/usr/bin/env bash
# Creates .venv with SGLang 0.5.23 (kernel registry, plugins, JIT sources) and astra-sglang's optimizer
# dependencies, on a machine without a GPU. Why not `pip install sglang`: that pulls an ~11 GB CUDA stack;
# the kernel/plugin/layer imports need a small subset (measured in shared/notes/environment.md).
# sglang pins openai==2.8.0 while openai-agents needs openai>=3: sglang goes in with --no-deps, so one
# venv can hold both for tests. A serving environment keeps sglang's pins and installs astra-sglang alone.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
pip() { .venv/bin/python -m pip "$@"; }
pip install -q --upgrade pip
pip install -q torch==2.13.0   # the CPU build (lies on disk on these machines)
pip install -q --no-deps sglang==0.5.23 flashinfer-python==0.7.2
pip install -q apache-tvm-ffi==0.1.11 msgspec numpy orjson psutil pybase64 requests packaging pillow starlette \
    pydantic pyzmq tqdm IPython aiohttp ninja triton==3.8.0 \
    transformers==5.19.0 dill sentencepiece gguf compressed-tensors==0.18.0
pip install -q -e '.[agents,dev]'
