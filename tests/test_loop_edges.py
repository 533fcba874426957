"""Honest endings of a run: a run where no round produced a correct candidate exits non-zero and says why,
and ``--json`` gives scripts the outcome (optimize summary, evaluate's results). Real loop, fake server, CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAIServer, Script, http_error
from loop_support import API_KEY, merge_state_dir, only_run, optimize_args

from astra_sglang.cli.main import main
from astra_sglang.loop.evaluator import EvalPending, QueueEvaluator
from astra_sglang.loop.records import EvalSpec

pytestmark = pytest.mark.timeout(400)


@pytest.fixture(scope="module")
def op_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return merge_state_dir(tmp_path_factory.getbasetemp())


@pytest.fixture()
def cpu_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("ASTRA_TEST_KEY", API_KEY)


def test_a_run_where_every_model_call_fails_exits_non_zero(op_dir: Path, tmp_path: Path, cpu_env, capsys):
    gone = '{"error": {"message": "The model `o4-mini` does not exist", "code": "model_not_found"}}'
    script = Script()
    for role in ("testing", "profiling", "planning", "coding"):
        script.default(role, lambda body: http_error(404, gone))
    runs = tmp_path / "runs"
    with FakeOpenAIServer(script, api_key=API_KEY) as srv:  # lists o4-mini, so the preflight passes
        rc = main(optimize_args(op_dir, runs, srv.url, "--rounds", "2", "--json"))
    out, err = capsys.readouterr()
    assert rc == 1
    summary = json.loads(out)  # stdout is the summary alone; progress went to stderr
    run = only_run(runs)
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "failed" == summary["status"] and summary["exit_code"] == 1
    assert meta["message"].startswith("no round produced a correct candidate (2 failed)")
    assert "404" in meta["message"] and summary["message"] == meta["message"]
    assert [(r["round"], r["status"]) for r in summary["rounds"]] == [(0, "ok"), (1, "failed"), (2, "failed")]
    assert summary["run_dir"] == str(run) and summary["winner"]["round"] is None
    assert "no round produced a correct candidate" in err


def test_evaluate_json_reports_what_it_evaluated(op_dir: Path, tmp_path: Path, cpu_env, capsys):
    queue = tmp_path / "queue"
    spec = EvalSpec(shapes="test", device="cpu")
    with pytest.raises(EvalPending):
        QueueEvaluator(op_dir, queue, "run1").evaluate("r000-original", None, spec)
    assert main(["evaluate", str(queue), "--extracted", str(op_dir.parent), "--json"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert [e["item"] for e in report["evaluated"]] == ["run1--r000-original"]
    assert report["evaluated"][0]["result"]["op_id"] and report["evaluated"][0]["result"]["correctness"]["ok"]
    assert (report["done"], report["pending"]) == (1, 0)
    assert "evaluating run1--r000-original" in err
    assert main(["evaluate", str(queue), "--extracted", str(op_dir.parent), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"evaluated": [], "done": 1, "pending": 0}
