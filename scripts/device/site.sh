# Sourced ON THE H200 by the scripts beside it: astra-sglang's dependencies missing from the device image
# (carried as .whl/, scripts/device/wheels.sh) installed into /tmp/site, and the repository on PYTHONPATH.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "$(basename "$0"): carry .whl (scripts/device/wheels.sh)"; exit 2; }
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1
# the worker's GPU sandbox must let CUDA start; where it does not, the first weaker one that does, for this call
# (SANDBOX_PROBE=--both: also say whether CUDA and a Triton kernel start inside Landlock, for the record)
fallback=$(python3 scripts/device/sandbox_probe.py ${SANDBOX_PROBE:-}) || echo "$(basename "$0"): CUDA did not start in any worker sandbox"
eval "$fallback"
