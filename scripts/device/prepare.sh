#!/usr/bin/env bash
# Run HERE (the CPU host), from the repository root, after scripts/setup_env.sh: everything a device session carries,
# rebuilt on a bare machine in one command. This session's machine starts with git alone (2026-12-05: no .whl/,
# .srv/ or runs/; build_site.sh's default `python3.12` was not on PATH under pyenv).
#   .whl/                  astra-sglang's dependencies for the device's Python 3.12 (wheels.sh; carry it for evaluate)
#                          (AGENTS=1: openai-agents too, for a GPU test run: gpu_tests.sh)
#   .srv/site312.tar.xz    the SGLang runtime the device image lacks (h200_server/build_site.sh)
#   .srv/astra_sglang-*.whl  this commit's wheel, built from a clean export (a stale build/ leaks deleted files),
#                          checked against the tree (check_wheel.py); device.sh refuses any other
#   extracted/*/src/       SGLang's source files the contracts pin (extract --restore; git-ignored, carried as
#                          "extracted": without them the device has no kernel to evaluate)
#   runs/                  the kept model runs (runs_keep.sh restore), when model-runs/ holds any
# Usage: scripts/device/prepare.sh [--no-site]   (--no-site: skip the ~2-minute SGLang runtime archive)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=.venv/bin/python
[ -x "$PY" ] || { echo "prepare.sh: run scripts/setup_env.sh first"; exit 2; }
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
"$PY" -m astra_sglang extract --restore > /dev/null && echo "prepare.sh: extracted/*/src restored and verified"
bash scripts/device/wheels.sh > /dev/null && echo "prepare.sh: .whl/ $(ls .whl | wc -l) wheels"
if [ "${1:-}" != "--no-site" ]; then
  PY312=""
  if python3.12 -c '' 2>/dev/null; then PY312=$(command -v python3.12); fi  # a pyenv shim may exist and not run
  [ -n "$PY312" ] || PY312=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 2>/dev/null | tail -1)
  [ -n "$PY312" ] || { echo "prepare.sh: no Python 3.12 here for the device's site archive"; exit 2; }
  bash scripts/h200_server/build_site.sh "$PY312" > /dev/null && echo "prepare.sh: .srv/site312.tar.xz from $PY312"
fi
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
git archive HEAD | tar -x -C "$src"
mkdir -p .srv && rm -f .srv/astra_sglang-*.whl
(cd "$src" && "$OLDPWD/$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$OLDPWD/.srv" .)
"$PY" scripts/h200_server/check_wheel.py .srv/astra_sglang-*.whl . && echo "prepare.sh: $(ls .srv/*.whl) is HEAD"
[ -n "$(git status --porcelain --untracked-files=no)" ] && echo "prepare.sh: uncommitted changes are not in the wheel"
if [ -d model-runs ] && [ ! -d runs ]; then bash scripts/runs_keep.sh restore; fi
exit 0
