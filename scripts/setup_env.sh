#!/usr/bin/env bash
# Creates .venv with SGLang 0.5.23 (kernel registry, plugins, JIT sources) and astra-sglang's optimizer
# dependencies, on a machine without a GPU. Why not `pip install sglang`: that pulls a CUDA stack of many GB;
# the kernel/plugin/layer imports need the small subset installed below.
# sglang pins openai==2.8.0 while openai-agents needs openai>=3: sglang goes in with --no-deps, so one
# venv can hold both for tests (README.md, "Two environments, and why"). A serving environment keeps sglang's
# pins and installs astra-sglang alone.
set -euo pipefail

# pip's output without what these installs print by design: every later install lists each dependency of the
# --no-deps sglang / flashinfer-python as a conflict ("sglang 0.5.23 requires X, which is not installed"), and
# pip warns about the configured file:///opt/pypi* index folders it does not find. The script says so once;
# everything else (real errors, other packages' conflicts with pip's header line) passes through.
filter_pip() {
    awk '
        /^WARNING: Location .file:\/\/\/opt\/pypi[^ ]*. is ignored/ { next }
        /^ERROR: pip.s dependency resolver does not currently take into account/ { header = $0; next }
        /^(sglang|flashinfer-python) [^ ]+ requires .*(, which is not installed|which is incompatible)\.$/ { next }
        !/^[^ ]+ [^ ]+ requires / { header = "" }
        { if (header != "") { print header; header = "" } print; fflush() }
    '
}
if [ "${1:-}" = "--filter-pip-output" ]; then filter_pip; exit 0; fi  # the filter alone, on captured output

cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# pipefail: pip's own exit status survives the filter, so a failed install still stops the script
pip() { .venv/bin/python -m pip "$@" 2>&1 | filter_pip; }
pip install -q --upgrade pip
pip install -q torch==2.13.0   # the CPU build (lies on disk on these machines)
pip install -q --no-deps sglang==0.5.23 flashinfer-python==0.7.2
echo "setup_env.sh: sglang and flashinfer-python go in with --no-deps on purpose; pip's \"sglang requires X, which is" \
    "not installed\" conflict lines are expected and hidden"
pip install -q apache-tvm-ffi==0.1.11 msgspec numpy orjson psutil pybase64 requests packaging pillow starlette \
    pydantic pyzmq tqdm IPython aiohttp ninja triton==3.8.0 \
    transformers==5.19.0 dill sentencepiece gguf compressed-tensors==0.18.0
pip install -q -e '.[agents,dev]'
