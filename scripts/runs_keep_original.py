"""runs_keep.sh's helper: a run's files quote the original SGLang kernel verbatim (round 0's record ``source``,
the agents' transcripts in suite/diagnosis/plan/code JSON, check results), and SGLang's files are never committed.
``strip DIR`` replaces every verbatim copy in a kept run's JSON by a marker naming the file and its sha256;
``fill DIR`` puts the text back from the op's extracted source (``extract --restore`` first), refusing when the
extracted file is not the one the marker names. The model's own kernels (candidate .py files) are kept as written."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from astra_sglang.contract.base import sha256_bytes
from astra_sglang.contract.op import load_manifest

MARK = "<<astra-sglang: the original SGLang kernel {path}, sha256 {sha}, left out of model-runs/>>"
MARK_START = MARK.split("{")[0]


def _original(op: str) -> tuple[str, str] | None:
    op_dir = Path("extracted") / op
    try:
        source = getattr(load_manifest(op_dir).recipe, "source", None)  # a Triton op's one file
        if source is None:
            return None
        path = op_dir / source
        return path.read_text(), MARK.format(path=path, sha=sha256_bytes(path.read_bytes()))
    except (OSError, ValueError):
        return None


def _swap(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, list):
        return [_swap(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: _swap(v, old, new) for k, v in value.items()}
    return value


def main(mode: str, root: Path) -> int:
    for op_root in sorted(p for p in root.iterdir() if p.is_dir()):
        if not any(op_root.glob("*/run.json")):
            continue
        found = _original(op_root.name)
        if found is None:
            print(f"runs_keep: no extracted/{op_root.name} Triton source here (extract --restore): its runs are left "
                  "as they are", file=sys.stderr)
            continue
        text, mark = found
        old, new = (text, mark) if mode == "strip" else (mark, text)
        for f in sorted(op_root.rglob("*.json")):
            raw = f.read_text()
            if mode == "fill" and MARK_START in raw and mark not in raw:
                print(f"runs_keep: {f}: the extracted original is not the one this run measured", file=sys.stderr)
                return 1
            data = json.loads(raw)
            swapped = _swap(data, old, new)
            if swapped != data:
                f.write_text(json.dumps(swapped, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
