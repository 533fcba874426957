#!/usr/bin/env bash
# Run HERE (the CPU host), from the repository root: the wheels `evaluate` needs on the H200 image, which has
# torch, triton and rich but not pydantic or tvm-ffi (KINDS.md's package list). Same versions as .venv, for the
# device's CPython 3.12. .whl/ is git-ignored; name it in the device call's carry.
# AGENTS=1: also openai-agents and openai with their dependencies (about 15 MB more), pinned to .venv's versions, for
# a GPU test run: three test modules import the SDK, and without it they were not even collected (2026-12-05).
set -euo pipefail
PY=${PY:-.venv/bin/python}
rm -rf .whl && mkdir -p .whl
for name in pydantic pydantic_core annotated-types typing-inspection apache-tvm-ffi typing_extensions; do
  version=$("$PY" -m pip show "$name" 2>/dev/null | awk '/^Version:/{print $2}')
  [ -n "$version" ] || { echo "wheels.sh: $name is not installed in $PY's environment (run scripts/setup_env.sh)"; exit 2; }
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "$name==$version"
done
if [ "${AGENTS:-0}" = 1 ]; then
  pins=$(mktemp); trap 'rm -f "$pins"' EXIT
  "$PY" -m pip freeze --exclude-editable > "$pins"
  python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -c "$pins" -d .whl openai-agents openai > "$pins.log" 2>&1 \
    || { grep -v "is ignored: it is neither a file nor a directory" "$pins.log"; rm -f "$pins.log"
         echo "wheels.sh: openai-agents and its dependencies could not be downloaded"; exit 2; }
  rm -f "$pins.log"
fi
ls .whl
