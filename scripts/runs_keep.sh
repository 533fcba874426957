#!/usr/bin/env bash
# Keep model runs across machines. runs/ is git-ignored, and the machine a session works on starts bare: on
# 2026-12-05 every decode-attention MODEL RUN (the round-1 and round-2 candidates, their queue results, the patch
# folder of the candidate measured end to end) was lost with it, and the runs had to start again from round 0.
# `save` copies runs/ into the tracked model-runs/ (then commit it) without calls/ (the model requests, which
# quote SGLang's sources: those are never committed) and without build folders; `restore` puts it back, so
# `optimize --resume RUN` and `evaluate QUEUE` go on where the last session stopped. The file: provider's
# request folders are not kept: a resumed run writes its pending request again.
# Usage: scripts/runs_keep.sh save|restore
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
case "${1:-}" in
  save)
    [ -d runs ] || { echo "runs_keep.sh: no runs/ here"; exit 2; }
    mkdir -p model-runs
    tar -C runs --exclude='*/calls' --exclude='calls' --exclude='*/build' --exclude='__pycache__' -cf - . \
      | tar -C model-runs -xf -
    "$PY" scripts/runs_keep_original.py strip model-runs  # round 0's verbatim SGLang kernel
    du -sh model-runs ;;
  restore)
    [ -d model-runs ] || { echo "runs_keep.sh: no model-runs/ in this checkout"; exit 2; }
    mkdir -p runs
    tar -C model-runs -cf - . | tar -C runs -xf -
    "$PY" scripts/runs_keep_original.py fill runs  # from extracted/ (extract --restore first)
    echo "restored into runs/: $(ls model-runs | tr '\n' ' ')" ;;
  *) echo "usage: scripts/runs_keep.sh save|restore"; exit 2 ;;
esac
