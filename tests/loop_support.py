"""Shared pieces of the agents-loop tests: the merge_state op folder, scripted replies, a loop runner.

Candidates are the developers' scripted merge_state kernels in tests/candidates/merge_state/scripted/
(r1 does not parse, r2 leaves the last element of each head unwritten, r3-r5 are correct); none of them was
written by a language model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from astra_sglang.contract.result import EvalResult, ShapeTiming, TimingReport

REPO = Path(__file__).resolve().parents[1]
SCRIPTED = REPO / "tests" / "candidates" / "merge_state" / "scripted"
API_KEY = "sk-astra-test-7f3a9c1e5b2d"  # fake; the tests grep run folders for it
INJECTED = "INJECTED BY TEST: no GPU on this host, not a measurement"
PY = sys.executable


def candidate(name: str) -> str:
    return (SCRIPTED / name).read_text()


def merge_state_dir(tmp_root: Path) -> Path:
    """A validated copy of extracted/merge_state (a fresh extract when the repo folder lacks its SGLang source).

    `optimize` refuses a contract the original kernel never agreed with, so the fixture validates it first,
    on CPU under the interpreter, exactly as `validate-contract --device cpu` does; the copy keeps the
    repository's folder free of test records."""
    repo_op = REPO / "extracted" / "merge_state"
    if (repo_op / "manifest.json").is_file() and any((repo_op / "src").rglob("merge_state.py")):
        return validated_copy(repo_op, tmp_root)
    out = tmp_root / "extracted"
    if not (out / "merge_state" / "manifest.json").is_file():
        subprocess.run([PY, "-m", "astra_sglang", "extract", "merge_state", "--out", str(out)], check=True,
                       cwd=REPO, capture_output=True, text=True)
    return validated_copy(out / "merge_state", tmp_root)


def validated_copy(op_dir: Path, tmp_root: Path) -> Path:
    """``op_dir`` copied under ``tmp_root/validated/`` with a passing CPU validation record (made once)."""
    import shutil

    from astra_sglang.contract.op import load_manifest
    from astra_sglang.contract.validation import current_validation, record_validation
    from astra_sglang.harness import validate_contract, validation_config

    dest = tmp_root / "validated" / op_dir.name
    if (dest / "manifest.json").is_file() and current_validation(dest) is not None:
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(op_dir, dest, ignore=shutil.ignore_patterns("build", "__pycache__", "validation.json"))
    v, _ = validate_contract(dest, validation_config("cpu"))
    assert v.passed, f"{op_dir.name} does not validate on CPU: {v.first_failure}"
    record_validation(dest, load_manifest(dest).op_id, v)
    return dest


# ------------------------------------------------------------------------------------ scripted replies

def suite_reply(extra_invalid: bool = True) -> dict[str, Any]:
    cases = [
        {"dims": [{"name": "T", "value": 3}, {"name": "NH", "value": 2}, {"name": "D", "value": 96}],
         "dtype": "float16", "distribution": "special", "why": "+-inf LSE with a padded head dim"},
        {"dims": [{"name": "T", "value": 1}, {"name": "NH", "value": 1}, {"name": "D", "value": 128}],
         "dtype": "bfloat16", "distribution": "tiny", "why": "smallest shape, near-underflow values"},
    ]
    if extra_invalid:
        cases.append({"dims": [{"name": "T", "value": 0}, {"name": "NH", "value": 1}, {"name": "D", "value": 8}],
                      "dtype": "bfloat16", "distribution": "normal", "why": "T=0 is outside the contract"})
    return {"cases": cases, "rationale": "tails, special values, smallest sizes"}


def diagnosis_reply(summary: str = "memory-bound; one program per (token, head) row") -> dict[str, Any]:
    return {"bound": "memory", "pct_of_copy_ceiling": None, "where_time_goes": "loads of the two partial outputs",
            "evidence": ["no timing on this device"], "summary": summary}


def plan_reply(title: str = "tile rows") -> dict[str, Any]:
    return {"suggestions": [{"title": title, "change": "process ROWS (token, head) rows per program",
                             "expected_effect": "fewer programs, wider loads", "risk": "tail rows, +inf LSE"}],
            "lessons_from_history": "none yet", "avoid": []}


def code_reply(source: str, changes: str = "scripted candidate") -> dict[str, Any]:
    return {"source": source, "changes": changes}


def single_reply(source: str) -> dict[str, Any]:
    return {"diagnosis": "memory-bound", "plan": ["tile rows"], "source": source, "changes": "scripted candidate"}


# ---------------------------------------------------------------------------------------- running it

def ctrl_c_deliverable() -> None:
    """``preexec_fn`` for a child that a test interrupts with SIGINT: a shell starts a background job (``pytest ... &``)
    with SIGINT ignored, children inherit that, and Ctrl-C would never arrive; a terminal's foreground process has
    the default disposition, which is what these tests are about."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def loop_env(extra: dict[str, str] | None = None, interpret: bool = True) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["ASTRA_TEST_KEY"] = API_KEY
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    env.update(extra or {})
    return env


def optimize_args(op_dir: Path, runs: Path, base_url: str, *more: str) -> list[str]:
    return ["optimize", str(op_dir), "--runs-dir", str(runs), "--model", "o4-mini", "--base-url", base_url,
            "--api-key-env", "ASTRA_TEST_KEY", "--shapes", "test", "--device", "cpu", "--no-live",
            "--retry-backoff-s", "0.05", "--request-timeout-s", "5", *more]


def run_cli(args: list[str], env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "astra_sglang", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


def only_run(runs: Path) -> Path:
    found = sorted(p.parent for p in runs.glob("*/*/run.json"))
    assert len(found) == 1, found
    return found[0]


def grep_tree(root: Path, needle: str) -> list[Path]:
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and needle.encode() in path.read_bytes():
            hits.append(path)
    return hits


def answer_files(directory: Path, answer: Callable[[dict], dict], stop: threading.Event) -> None:
    """Plays the person or gateway on the other side of ``file:DIR``: answers each request, in order."""
    answered: set[str] = set()
    while not stop.is_set():
        for req in sorted(directory.glob("*.request.json")):
            if req.name in answered:
                continue
            answered.add(req.name)
            body = answer(json.loads(req.read_text()))
            tmp = req.with_name("." + req.name + ".tmp")
            tmp.write_text(json.dumps(body))
            tmp.rename(req.with_name(req.name.replace(".request.json", ".response.json")))
        time.sleep(0.05)


# ------------------------------------------------------------------------------- playing the GPU host

def inject_timing(result: EvalResult, speedup: float) -> EvalResult:
    # a shape merge_state's default patch guard covers (the span of its contract's shapes: D 96..256)
    shape = ShapeTiming(dims={"T": 5, "NH": 8, "D": 128}, dtype="bfloat16", original_us=10.0,
                        candidate_us=10.0 / speedup, spread_pct=0.0, speedup=speedup,
                        verdict="faster" if speedup > 1 else ("slower" if speedup < 1 else "no change"),
                        bytes_moved=1, original_gbps=0.0, candidate_gbps=0.0, original_pct_ceiling=0.0,
                        candidate_pct_ceiling=0.0)
    timing = TimingReport(method=INJECTED, copy_ceiling_gbps=1.0, shapes=[shape], geomean_speedup=speedup)
    return result.model_copy(update={"timing": timing, "device": f"{result.device} + {INJECTED}"})


def answer_queue(queue: Path, op_dir: Path, speedups: dict[str, float]) -> list[str]:
    """What `astra-sglang evaluate QUEUE` does on the GPU host (the real harness verdict), plus a timing that
    was NOT measured, marked INJECTED, one atomic write per item. Returns the labels it answered."""
    from astra_sglang.harness import evaluate
    from astra_sglang.loop.evaluator import RESULT_NAME, list_queue, to_eval_config
    from astra_sglang.loop.runfolder import atomic_write

    seen = []
    for item_dir, request, result in list_queue(queue):
        if result is not None:
            continue
        cand = item_dir / request.candidate_file if request.candidate_file else None
        res = evaluate(op_dir, cand, to_eval_config(request.spec))
        atomic_write(item_dir / RESULT_NAME, inject_timing(res, speedups[request.label]).model_dump_json())
        seen.append(request.label)
    return seen


MERGE_DIMS = {"T": 512, "NH": 40, "D": 128}


def merge_sweep_baseline(speedup: float, device: str = "NVIDIA H200 (sm_90)") -> Any:
    """A round-0 sweep of merge_state's num_warps at one paper shape (SCRIPTED numbers, not a measurement): the
    best config 8 warps, ``speedup`` over Triton's default of 4."""
    from astra_sglang.contract.result import BaselineShape, SweepBaseline, SweepConfig

    return SweepBaseline(op_id="attention.merge_state_triton", sglang_version="0.5.23", device=device,
                         parameters={"merge_state_kernel.num_warps": [1, 2, 4, 8]},
                         original_config={"merge_state_kernel.num_warps": "4 (Triton's default)"},
                         shapes=[BaselineShape(dims=MERGE_DIMS, dtype="bfloat16", original_us=10.0,
                                               best_config={"merge_state_kernel.num_warps": 8},
                                               best_us=10.0 / speedup, speedup=speedup)],
                         configs=[SweepConfig(config={"merge_state_kernel.num_warps": 8}, ok=True)])
