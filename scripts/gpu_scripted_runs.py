"""5-round runs of the real optimizer loop on the GPU, driven by SCRIPTED candidates (issue 4's H200 demo).

No language model is reachable from the GPU machines, so the loop talks to the fake OpenAI-compatible server
of tests/fake_openai_server.py on 127.0.0.1, which answers each agent with scripted replies; the Coding
agent's answer in round k is tests/candidates/<op>/scripted/<file of round k> (see scripted.json there).
Everything else is real: the openai-agents SDK, HTTP, tool calls, the run folder, the harness building,
checking and timing every candidate on the GPU, the held-out confirmation, the winner choice.

Every line of output, the run log (``--label``) and the report say: SCRIPTED candidates (written by the
developers, not found by a model). Never quote these numbers as a model's result.

Usage (repo root, on the GPU host; one op per call fits the 10-minute command limit; re-running resumes):
    python scripts/gpu_scripted_runs.py --ops merge_state [--rounds 5] [--out DIR]
Writes DIR/runs/<op>/scripted-<op>/ (the run folder) and DIR/scripted_<op>.json / .md (the report);
DIR defaults to $OUT, else ./runs-scripted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from fake_openai_server import FakeOpenAIServer, Reply, final, tool_call  # noqa: E402

LABEL = "SCRIPTED candidates (written by the developers, not found by a model)"
PAPER_OPS = ("merge_state", "silu_and_mul", "fused_add_rmsnorm")
KEY_ENV = "ASTRA_SCRIPTED_RUN_KEY"
MODEL = "scripted-candidates"


def _user_text(body: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in body.get("messages", []) if m.get("role") == "user"
                     and isinstance(m.get("content"), str))


def _round_of(body: dict[str, Any]) -> int:
    m = re.search(r"^## round\n(\d+)$", _user_text(body), re.MULTILINE)
    return int(m.group(1)) if m else 0


def responder(scripted_dir: Path, plan: dict[str, Any]):
    """Stateless replies (by role and round, read from the request), so a resumed run gets the same ones."""
    rounds = {r["round"]: r for r in plan["rounds"]}

    def reply(body: dict[str, Any]) -> Reply:
        text = json.dumps(body.get("messages", [])[:1])
        role = re.search(r"# Role: (\w+) agent", text)
        role_name = role.group(1) if role else ""
        last = body.get("messages", [])[-1]
        k = _round_of(body)
        if role_name == "testing":
            return final({"cases": [], "rationale": f"{LABEL}: no extra cases; the harness's own suite is used"})
        if role_name == "profiling":
            if last.get("role") != "tool":
                return tool_call("run_timing", {})
            lines = str(last.get("content", "")).splitlines()
            return final({"bound": "unknown", "pct_of_copy_ceiling": None,
                          "where_time_goes": f"{LABEL}: not diagnosed (no model); the timing is below",
                          "evidence": lines[:12], "summary": f"{LABEL}: scripted profiling step"})
        if role_name == "planning":
            r = rounds.get(k, {})
            return final({"suggestions": [{"title": f"round {k} (scripted)", "change": r.get("tried", "none"),
                                           "expected_effect": r.get("expected", ""), "risk": r.get("defect", "")}],
                          "lessons_from_history": LABEL, "avoid": []})
        if role_name == "coding":
            r = rounds.get(k)
            if r is None:
                return final({"source": "", "changes": f"no scripted candidate for round {k}"})
            return final({"source": (scripted_dir / r["file"]).read_text(),
                          "changes": f"{LABEL}: {r['file']}: {r.get('tried', '')}"})
        return Reply(status=500, error_body=json.dumps({"error": {"message": f"no script for role {role_name}"}}))

    return reply


def ensure_extracted(op: str, extracted: Path) -> Path:
    op_dir = extracted / op
    if not (op_dir / "manifest.json").is_file() or not any((op_dir / "src").rglob("*")):
        import subprocess

        proc = subprocess.run([sys.executable, "-m", "astra_sglang", "extract", op, "--out", str(extracted)], cwd=REPO,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"extract {op} failed:\n{proc.stdout}\n{proc.stderr}")
    return op_dir


def run_op(op: str, out: Path, rounds: int, shapes: str, device: str, extracted: Path) -> dict[str, Any]:
    from astra_sglang.cli.main import main

    scripted_dir = REPO / "tests" / "candidates" / op / "scripted"
    plan_path = scripted_dir / "scripted.json"
    if not plan_path.is_file():
        print(f"[{op}] no {plan_path.relative_to(REPO)}: skipped ({LABEL} not written yet)")
        return {"op": op, "skipped": True}
    plan = json.loads(plan_path.read_text())
    op_dir = ensure_extracted(op, extracted)
    runs = out / "runs"
    run_id = f"scripted-{op}"
    run_dir = runs / op / run_id
    os.environ[KEY_ENV] = "scripted-no-model"
    with FakeOpenAIServer(responder(scripted_dir, plan), api_key="scripted-no-model", models=(MODEL,)) as srv:
        common = ["--base-url", srv.url, "--api-key-env", KEY_ENV, "--no-live", "--runs-dir", str(runs)]
        if (run_dir / "run.json").is_file():
            argv = ["optimize", "--resume", str(run_dir), *common]
        else:
            argv = ["optimize", str(op_dir), "--model", MODEL, "--rounds", str(rounds), "--max-fix-attempts", "0",
                    "--label", LABEL, "--run-id", run_id, "--shapes", shapes, "--device", device, *common]
        print(f"[{op}] {LABEL}\n[{op}] python -m astra_sglang {' '.join(argv)}", flush=True)
        rc = main(argv)
    if rc != 0:
        print(f"[{op}] optimize exited {rc}")
    return report(op, run_dir, plan, out)


def report(op: str, run_dir: Path, plan: dict[str, Any], out: Path) -> dict[str, Any]:
    if not (run_dir / "run.json").is_file():
        return {"op": op, "label": LABEL, "status": "no run folder (failed before the run started)"}
    meta = json.loads((run_dir / "run.json").read_text())
    log_path = run_dir / "log.jsonl"
    log = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()] if log_path.is_file() else []
    files = {r["round"]: r for r in plan["rounds"]}
    rows = []
    for rec in log:
        r = files.get(rec["round"], {})
        rows.append({"round": rec["round"], "file": r.get("file", "original"),
                     "expected": r.get("expected_verdict", "-"), "status": rec["status"], "correct": rec["correct"],
                     "geomean_speedup": rec["geomean_speedup"],
                     "per_shape": [{"dims": t["dims"], "dtype": t["dtype"], "original_us": t["original_us"],
                                    "candidate_us": t["candidate_us"], "speedup": t["speedup"],
                                    "verdict": t["verdict"]} for t in rec["times"]],
                     "failure": (rec.get("first_failure") or rec.get("error") or "")[:300]})
    winner = meta.get("winner") or {}
    result = {"label": LABEL, "op": op, "run_dir": str(run_dir), "status": meta["status"],
              "message": meta.get("message"), "rounds": rows,
              "winner": winner, "expected_winner": plan.get("expected_winner")}
    (out / f"scripted_{op}.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [f"# {op}: {LABEL}", "", f"run folder: {run_dir}; status {meta['status']} {meta.get('message') or ''}", "",
             "| round | file | expected | status | correct | geomean speedup | per-shape speedups |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        per = ", ".join(f"{'x'.join(str(v) for v in s['dims'].values())}:{s['speedup']:.2f}" if s["speedup"]
                        else f"{'x'.join(str(v) for v in s['dims'].values())}:-" for s in row["per_shape"])
        gm = "-" if row["geomean_speedup"] is None else f"{row['geomean_speedup']:.3f}"
        lines.append(f"| {row['round']} | {row['file']} | {row['expected']} | {row['status']} | {row['correct']} | "
                     f"{gm} | {per} |")
    lines += ["", f"winner: round {winner.get('round')} ({winner.get('reason')}), geomean "
                  f"{winner.get('geomean_speedup')}, held-out ok {winner.get('heldout_ok')}; expected winner "
                  f"{plan.get('expected_winner')}", "", LABEL]
    (out / f"scripted_{op}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default=",".join(PAPER_OPS), help="comma-separated ops (default: the 3 paper ops)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--shapes", default="paper")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--extracted", type=Path, default=REPO / "extracted", help="extracted ops root")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "runs-scripted"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"=== {LABEL} ===", flush=True)
    results = [run_op(op, args.out, args.rounds, args.shapes, args.device, args.extracted.resolve()) for op in args.ops.split(",") if op]
    (args.out / "scripted_runs.json").write_text(json.dumps({"label": LABEL, "results": results}, indent=1) + "\n")
    print(f"=== {LABEL} ===")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
