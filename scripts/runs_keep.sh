#!/usr/bin/env bash
# Keep model runs across machines. runs/ is git-ignored, and the machine a session works on starts bare: on
# 2026-12-05 every decode-attention MODEL RUN (the round-1 and round-2 candidates, their queue results, the patch
# folder of the candidate measured end to end) was lost with it, and the runs had to start again from round 0.
# `save` packs runs/ into the tracked model-runs/, one xz archive per top-level entry (an op's runs, a queue, a log),
# without calls/ (the model requests, which quote SGLang's sources: those are never committed) and without build
# folders; `restore` unpacks them into runs/, so `optimize --resume RUN` and `evaluate QUEUE` go on where the last
# session stopped. The file: provider's request folders are not kept: a resumed run writes its pending request again.
# Archives, not the files themselves: the runs' JSON (transcripts, records, logs) is 20 MB as files and under 1 MB
# packed, and every device call carries the whole tracked tree within 64 MiB (2026-12-06: the FlashInfer profile's
# site archives did not fit beside the unpacked runs). Saving is additive: what an archive held and runs/ lacks stays.
# The archives are byte-stable (sorted names, zero times and owners), so an unchanged entry is no git change.
# model-runs/INDEX.txt lists what each archive holds; read one with `tar -xJf model-runs/NAME.tar.xz -C DIR`.
# Usage: scripts/runs_keep.sh save|restore
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
pack() { tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$1" -cf - "$2" | xz -9 -T1 -c; }
case "${1:-}" in
  save)
    [ -d runs ] || { echo "runs_keep.sh: no runs/ here"; exit 2; }
    mkdir -p model-runs
    work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
    for a in model-runs/*.tar.xz; do [ -f "$a" ] && tar -C "$work" -xJf "$a"; done
    for d in model-runs/*; do  # an unpacked entry of the older layout: kept, then packed like the rest
      case "$d" in *.tar.xz|*/INDEX.txt) ;; *) [ -e "$d" ] && cp -a "$d" "$work/" ;; esac
    done
    tar -C runs --exclude='*/calls' --exclude='calls' --exclude='*/build' --exclude='__pycache__' -cf - . \
      | tar -C "$work" -xf -
    "$PY" scripts/runs_keep_original.py strip "$work"  # round 0's verbatim SGLang kernel
    for e in "$work"/*; do
      name=$(basename "$e")
      pack "$work" "$name" > "model-runs/$name.tar.xz.part" && mv "model-runs/$name.tar.xz.part" "model-runs/$name.tar.xz"
      rm -rf "model-runs/${name:?}"
    done
    for a in model-runs/*.tar.xz; do echo "== $a"; tar -tJf "$a" | grep -v '/$'; done > model-runs/INDEX.txt
    du -sh model-runs ;;
  restore)
    [ -d model-runs ] || { echo "runs_keep.sh: no model-runs/ in this checkout"; exit 2; }
    mkdir -p runs
    for a in model-runs/*.tar.xz; do [ -f "$a" ] && tar -C runs -xJf "$a"; done
    for d in model-runs/*; do  # the older unpacked layout
      case "$d" in *.tar.xz|*/INDEX.txt) ;; *) [ -e "$d" ] && cp -a "$d" runs/ ;; esac
    done
    "$PY" scripts/runs_keep_original.py fill runs  # from extracted/ (extract --restore first)
    echo "restored into runs/: $(ls runs | tr '\n' ' ')" ;;
  *) echo "usage: scripts/runs_keep.sh save|restore"; exit 2 ;;
esac
