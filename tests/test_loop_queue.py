"""Two ways in when the model or the GPU is elsewhere: the evaluation queue and the ``file:`` provider.

The queue run also decides a winner. This host has no GPU, so the harness reports no timing here; the test
plays the GPU host: the harness's real correctness verdict is kept and a timing it did NOT measure is added,
marked ``INJECTED BY TEST`` in the method and device fields, so nobody can mistake it for a measurement.
What the test shows is the choice: the fastest correct candidate wins, a wrong one never does (not even
with the biggest injected speedup), and the winner is confirmed on held-out shapes before it is kept.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from fake_openai_server import (
    FakeOpenAIServer,
    Reply,
    Script,
    final,
    role_of,
    tool_call,
)
from loop_support import (
    API_KEY,
    INJECTED,
    answer_files,
    answer_queue,
    candidate,
    code_reply,
    diagnosis_reply,
    grep_tree,
    inject_timing,
    loop_env,
    merge_state_dir,
    only_run,
    optimize_args,
    plan_reply,
    run_cli,
    single_reply,
    suite_reply,
)

from astra_sglang.cli.main import main
from astra_sglang.contract.result import EvalResult
from astra_sglang.loop.evaluator import (
    REQUEST_NAME,
    RESULT_NAME,
    EvalPending,
    QueueEvaluator,
)
from astra_sglang.loop.records import EvalSpec, QueueRequest
from astra_sglang.loop.runfolder import atomic_write

pytestmark = pytest.mark.timeout(500)
SPEEDUPS = {"r000-original": 1.0, "r001": 5.0, "r002": 1.8, "r003": 0.7, "r002-heldout": 1.7}


@pytest.fixture(scope="module")
def op_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return merge_state_dir(tmp_path_factory.getbasetemp())


def _inject_file(path: Path, label: str) -> None:
    result = EvalResult.model_validate_json(path.read_text())
    atomic_write(path, inject_timing(result, SPEEDUPS[label]).model_dump_json(indent=1))


def _gpu_host(queue: Path, op_dir: Path, stop: threading.Event, seen: list[str]) -> None:
    """Answers queue requests like `evaluate QUEUE` would, plus the marked timing, in one atomic write."""
    while not stop.is_set():
        seen += answer_queue(queue, op_dir, SPEEDUPS)
        time.sleep(0.2)


def test_queue_run_chooses_fastest_correct_confirmed_on_heldout(op_dir: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # for this process's harness calls (the "GPU host")
    runs, queue, patches = tmp_path / "runs", tmp_path / "queue", tmp_path / "patches"
    s = Script()
    s.add("testing", final(suite_reply()))
    s.add("profiling", final(diagnosis_reply()))
    s.add("planning", final(plan_reply("r1")), final(plan_reply("r2")), final(plan_reply("r3")))
    s.add("coding", final(code_reply(candidate("r2.py"), "wrong: drops the last element")),
          final(code_reply(candidate("r5.py"), "big tiles")), final(code_reply(candidate("r3.py"), "chunks")))
    s.add("profiling", final(diagnosis_reply("round 3")))
    # The loop's host has no TRITON_INTERPRET and no GPU: it only writes requests and reads results.
    env = loop_env(interpret=False)
    with FakeOpenAIServer(s, api_key=API_KEY) as srv:
        args = optimize_args(op_dir, runs, srv.url, "--rounds", "3", "--eval-queue", str(queue),
                             "--run-id", "q1")
        first = run_cli(args, env)
        assert first.returncode == 3, first.stdout + first.stderr
        assert "waiting for 1 evaluation" in first.stdout and "evaluate" in first.stdout
        run = only_run(runs)
        assert json.loads((run / "run.json").read_text())["status"] == "waiting_eval"
        (item,) = [p.parent for p in queue.glob(f"*/{REQUEST_NAME}")]
        assert QueueRequest.model_validate_json((item / REQUEST_NAME).read_text()).candidate_file is None

        # The GPU host's command, for real (here on CPU): it fills in the result; the test adds the timing.
        filled = run_cli(["evaluate", str(queue), "--extracted", str(op_dir.parent)], loop_env())
        assert filled.returncode == 0, filled.stdout + filled.stderr
        assert "1 done, 0 pending" in filled.stdout
        _inject_file(item / RESULT_NAME, "r000-original")

        # Resume, this time waiting on the queue while the "GPU host" answers each request.
        stop = threading.Event()
        seen: list[str] = []
        host = threading.Thread(target=_gpu_host, args=(queue, op_dir, stop, seen), daemon=True)
        host.start()
        try:
            second = run_cli(["optimize", "--resume", "q1", "--runs-dir", str(runs), "--eval-wait-s", "200",
                              "--no-live", "--register-patch", "--patch-id", "ms-queue-test"],
                             loop_env({"ASTRA_SGLANG_PATCHES_DIR": str(patches)}, interpret=False))
        finally:
            stop.set()
            host.join(timeout=60)
    assert second.returncode == 0, second.stdout + second.stderr
    assert seen == ["r001", "r002", "r003", "r002-heldout"]

    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert [(r["round"], r["status"], r["geomean_speedup"]) for r in log] == [
        (0, "ok", 1.0), (1, "incorrect", 5.0), (2, "ok", 1.8), (3, "ok", 0.7)]
    assert [r["base_round"] for r in log[1:]] == [0, 0, 2]  # round 1 was wrong: round 2 starts from the original
    meta = json.loads((run / "run.json").read_text())
    winner = meta["winner"]
    assert meta["status"] == "done" and winner["round"] == 2 and winner["heldout_ok"] is True
    assert INJECTED in winner["timing_source"]
    best = run / "best"
    assert (best / "merge_state.py").read_text() == candidate("r5.py")
    held = EvalResult.model_validate_json((best / "heldout.json").read_text())
    assert held.correctness is not None and held.correctness.ok and held.correctness.heldout_cases_run > 0
    assert "INJECTED" in second.stdout  # the final table says where the times came from
    # Handed to the patch registry with its evidence.
    patch = patches / "merge_state" / "ms-queue-test"
    assert (patch / "kernel.py").read_text() == candidate("r5.py")
    assert grep_tree(run, API_KEY) == [] and grep_tree(queue, API_KEY) == []


def _as_file_answer(script: Script):
    def answer(body: dict) -> dict:
        reply: Reply = script(body)
        if reply.tool_calls:
            return {"tool_calls": [{"name": n, "arguments": a} for n, a in reply.tool_calls]}
        return {"content": reply.content}
    return answer


def test_single_agent_run_through_the_file_provider(op_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # the file: provider needs no key
    runs, inbox = tmp_path / "runs", tmp_path / "inbox"
    s = Script()
    s.add("single", final(suite_reply(extra_invalid=False)),
          tool_call("check_candidate", {"source": candidate("r4.py")}), final(single_reply(candidate("r4.py"))))
    stop = threading.Event()
    t = threading.Thread(target=answer_files, args=(inbox, _as_file_answer(s), stop), daemon=True)
    t.start()
    try:
        rc = main(["optimize", str(op_dir), "--runs-dir", str(runs), "--model", f"file:{inbox}", "--single-agent",
                   "--rounds", "1", "--shapes", "test", "--device", "cpu", "--no-live", "--file-timeout-s", "60"])
    finally:
        stop.set()
        t.join(timeout=10)
    assert rc == 0
    requests = sorted(inbox.glob("*.request.json"))
    assert len(requests) == 3 and len(list(inbox.glob("*.response.json"))) == 3
    body = json.loads(requests[1].read_text())
    assert role_of(body) == "single"
    assert {t["function"]["name"] for t in body["tools"]} == {"check_candidate", "run_timing", "resource_report"}
    assert body["response_format"]["json_schema"]["schema"]["title"] == "SingleAgentRound"
    run = only_run(runs)
    meta = json.loads((run / "run.json").read_text())
    assert meta["mode"] == "single-agent" and meta["status"] == "done"
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert [(r["round"], r["status"]) for r in log] == [(0, "ok"), (1, "ok")]
    assert log[1]["diagnosis_text"] == "memory-bound" and log[1]["source"] == candidate("r4.py")
    tool_outputs = [i["output"] for t in log[1]["transcript"] for i in t["items"]
                    if i.get("type") == "function_call_output"]
    assert tool_outputs and "CORRECT on all" in tool_outputs[0]


def test_evaluate_json_reports_what_it_evaluated(op_dir: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
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


def _two_correct_scripted(tmp_path: Path) -> list[Path]:
    """Scripted merge_state candidates r3 and r4 (both correct), as a round's two files."""
    out = []
    for name in ("r3.py", "r4.py"):
        out.append(tmp_path / name)
        out[-1].write_text(candidate(name))
    return out


def test_a_rounds_candidates_in_the_queue_are_evaluated_as_one_batch(op_dir: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch):
    """K candidates of one round (same op, same spec) reach the harness together, so their builds run in
    parallel on the GPU host; a request under another spec is its own batch; every item gets its result."""
    import astra_sglang.harness.parent.evaluate as harness_evaluate

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    real = harness_evaluate.evaluate_many
    batches: list[list[str | None]] = []

    def recording(op, candidates, config=None, on_result=None):
        batches.append([Path(c).parent.name if c is not None else None for c in candidates])
        return real(op, candidates, config, on_result=on_result)

    monkeypatch.setattr(harness_evaluate, "evaluate_many", recording)
    queue = tmp_path / "queue"
    spec = EvalSpec(shapes="test", device="cpu")
    srcs = _two_correct_scripted(tmp_path)
    with pytest.raises(EvalPending):
        QueueEvaluator(op_dir, queue, "run1").evaluate_many([("r001-c0", srcs[0]), ("r001-c1", srcs[1])], spec)
    with pytest.raises(EvalPending):
        QueueEvaluator(op_dir, queue, "run2").evaluate("r000-original", None, spec.model_copy(update={"mode": "warm"}))
    assert main(["evaluate", str(queue), "--extracted", str(op_dir.parent)]) == 0
    assert sorted(batches, key=len) == [[None], ["run1--r001-c0", "run1--r001-c1"]]  # None: the original
    for item in ("run1--r001-c0", "run1--r001-c1", "run2--r000-original"):
        result = EvalResult.model_validate_json((queue / item / RESULT_NAME).read_text())
        assert result.correctness is not None and result.correctness.ok, (item, result.error)


def test_a_queue_pass_cut_short_keeps_the_results_it_finished(op_dir: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch):
    """The GPU pass's time limit may stop a batch midway: the candidates already judged keep their result, the
    rest stay pending for the next pass (nothing measured is lost)."""
    import astra_sglang.harness.parent.evaluate as harness_evaluate

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    real = harness_evaluate.run_checker
    calls = {"n": 0}

    def cut_after_one(*a, **k):
        calls["n"] += 1
        if calls["n"] > 1:
            raise KeyboardInterrupt  # what `timeout` does to the pass
        return real(*a, **k)

    monkeypatch.setattr(harness_evaluate, "run_checker", cut_after_one)
    queue = tmp_path / "queue"
    srcs = _two_correct_scripted(tmp_path)
    with pytest.raises(EvalPending):
        QueueEvaluator(op_dir, queue, "run1").evaluate_many([("r001-c0", srcs[0]), ("r001-c1", srcs[1])],
                                                            EvalSpec(shapes="test", device="cpu"))
    from astra_sglang.loop.evaluator import process_queue

    with pytest.raises(KeyboardInterrupt):
        process_queue(queue, op_dir.parent)
    assert (queue / "run1--r001-c0" / RESULT_NAME).is_file()
    assert not (queue / "run1--r001-c1" / RESULT_NAME).exists()


def test_a_pass_evaluates_every_candidate_before_it_sweeps_an_original(op_dir: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch):
    """The round-0 sweep of SGLang's original (decode attention: 64 configs x 14 shapes, longer than a pass) sorts
    before the next rounds' candidates in the queue; rounds wait for candidates, never for the sweep, so a pass
    runs the evaluations first and the sweep with the time that is left."""
    import astra_sglang.harness as harness
    import astra_sglang.loop.evaluator as evaluator
    from astra_sglang.loop.evaluator import process_queue
    from astra_sglang.loop.records import TuneOutcome

    order: list[str] = []

    def swept(*a, **k) -> TuneOutcome:
        order.append("tune")
        return TuneOutcome(error="not swept in this test")

    monkeypatch.setattr(evaluator, "_tune_once", swept)

    def judged(op_dir, candidates, config, on_result=None):
        order.extend(str(c.parent.name) if c else "original" for c in candidates)
        return []

    monkeypatch.setattr(harness, "evaluate_many", judged)
    queue = tmp_path / "queue"
    paper = EvalSpec(shapes="paper", device="cuda")
    with pytest.raises(EvalPending):
        QueueEvaluator(op_dir, queue, "run1").sweep_baseline(paper)
    with pytest.raises(EvalPending):
        QueueEvaluator(op_dir, queue, "run1").evaluate_many([("r001-c0", _two_correct_scripted(tmp_path)[0])], paper)
    assert sorted(p.name for p in queue.iterdir()) == ["run1--r000-tune", "run1--r001-c0"]  # the sweep sorts first
    process_queue(queue, op_dir.parent)
    assert order == ["run1--r001-c0", "tune"], order


def _answer(queue: Path, op_dir: Path, labels: set[str]) -> list[str]:
    """The GPU host's answers for the named labels only: candidates and the original through the real harness on
    the CPU's test shapes, plus the INJECTED timing (named in the timing method; the device named is the
    scripted sweep's GPU, so the two stand side by side); the round-0 sweep as a SCRIPTED baseline (1.05x)."""
    from loop_support import merge_sweep_baseline

    from astra_sglang.harness import evaluate
    from astra_sglang.loop.evaluator import TUNE_RESULT_NAME, list_queue, to_eval_config
    from astra_sglang.loop.records import TuneOutcome

    done = []
    for item_dir, request, result in list_queue(queue):
        if result is not None or request.label not in labels:
            continue
        if request.job == "tune":
            atomic_write(item_dir / TUNE_RESULT_NAME, TuneOutcome(baseline=merge_sweep_baseline(1.05)).model_dump_json())
        else:
            cand = item_dir / request.candidate_file if request.candidate_file else None
            config = to_eval_config(request.spec).model_copy(update={"shapes": "test", "device": "cpu"})
            res = inject_timing(evaluate(op_dir, cand, config), {"r000-original": 1.0}.get(request.label, 1.6))
            # the sweep's GPU, for the sweep to stand beside these times; INJECTED stays in the timing method
            res = res.model_copy(update={"device": "NVIDIA H200 (sm_90)"})
            atomic_write(item_dir / RESULT_NAME, res.model_dump_json())
        done.append(request.label)
    return done


def test_the_rounds_do_not_wait_for_the_sweep_baseline_but_the_winner_does(op_dir: Path, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch):
    """The round-0 sweep can outlast a round's candidates on the GPU host (fused_moe: 96 configs x 20 decode
    shapes): with the original answered and the sweep not, round 1 is planned, written and queued; the run ends
    (winner chosen, held-out confirmed) only once the sweep is answered, so no winner is reported without it."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # this process's harness calls play the GPU host
    runs, queue = tmp_path / "runs", tmp_path / "queue"
    s = Script()
    s.add("testing", final(suite_reply()))
    s.add("profiling", final(diagnosis_reply()))
    s.add("planning", final(plan_reply("r1")))
    s.add("coding", final(code_reply(candidate("r5.py"), "big tiles")))
    env = loop_env(interpret=False)
    with FakeOpenAIServer(s, api_key=API_KEY) as srv:
        args = optimize_args(op_dir, runs, srv.url, "--rounds", "1", "--eval-queue", str(queue), "--run-id", "qs")
        args[args.index("--shapes") + 1], args[args.index("--device") + 1] = "paper", "auto"  # a GPU-sized spec
        resume = ["optimize", "--resume", "qs", "--runs-dir", str(runs), "--no-live"]
        first = run_cli(args, env)
        assert first.returncode == 3 and "qs--r000-original, qs--r000-tune" in first.stdout, first.stdout + first.stderr
        assert _answer(queue, op_dir, {"r000-original"}) == ["r000-original"]
        second = run_cli(resume, env)
        assert second.returncode == 3, second.stdout + second.stderr
        waiting = next(line for line in second.stdout.splitlines() if line.startswith("waiting for"))
        assert "qs--r001" in waiting and "r000-tune" not in waiting  # round 1 went on without the sweep
        assert _answer(queue, op_dir, {"r001"}) == ["r001"]
        third = run_cli(resume, env)
        assert third.returncode == 3, third.stdout + third.stderr
        waiting = next(line for line in third.stdout.splitlines() if line.startswith("waiting for"))
        assert waiting.endswith("qs--r000-tune"), waiting  # every round done: the winner waits for the sweep
        assert _answer(queue, op_dir, {"r000-tune"}) == ["r000-tune"]
        for _ in range(3):  # the held-out confirmation is one more trip to the "GPU host"
            last = run_cli(resume, env)
            if last.returncode != 3:
                break
            _answer(queue, op_dir, {"r001-heldout"})
    assert last.returncode == 0, last.stdout + last.stderr
    run = only_run(runs)
    r0 = json.loads((run / "rounds" / "r000" / "record.json").read_text())
    assert r0["sweep_baseline"]["baseline"] is not None and r0["sweep_baseline"].get("pending", []) == []
    assert "the winner beats the sweep baseline (1.050x" in last.stdout


def test_a_judge_error_is_not_a_verdict_until_it_happens_twice(op_dir: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch, capsys):
    """An exception in the judge's own process ('checker error') says nothing about the candidate: on the H200 a
    harness bug made every round-2 decode-attention candidate 'fail' that way (2026-12-05). The first such result
    is kept beside the item, which stays pending for the next pass (after a fix); a second one is final."""
    import astra_sglang.harness.parent.evaluate as harness_evaluate
    from astra_sglang.contract.result import BuildReport, CorrectnessReport
    from astra_sglang.loop.evaluator import CHECKER_ERROR_NAME, queue_status

    queue = tmp_path / "queue"
    src = _two_correct_scripted(tmp_path)[0]
    with pytest.raises(EvalPending):
        QueueEvaluator(op_dir, queue, "run1").evaluate("r001", src, EvalSpec(shapes="test", device="cpu"))
    answers = ["checker error: AcceleratorError: CUDA error: an illegal memory access was encountered",
               "checker error: still broken", None]

    def fake(op, candidates, config=None, on_result=None):
        error = answers.pop(0)
        r = EvalResult(op_id="x", candidate=str(candidates[0]), device="cpu (TRITON_INTERPRET=1)", sglang_version="0",
                       build=BuildReport(ok=True), correctness=CorrectnessReport(ok=error is None), error=error)
        on_result(0, r)
        return [r]

    monkeypatch.setattr(harness_evaluate, "evaluate_many", fake)
    item = queue / "run1--r001"
    assert main(["evaluate", str(queue), "--extracted", str(op_dir.parent), "--device", "cpu"]) == 0
    assert "the judge failed on its own side, not a verdict; left pending" in capsys.readouterr().out
    assert (item / CHECKER_ERROR_NAME).is_file() and not (item / RESULT_NAME).exists()
    assert queue_status(queue) == {"pending": 1, "done": 0}
    assert main(["evaluate", str(queue), "--extracted", str(op_dir.parent), "--device", "cpu"]) == 0
    final = EvalResult.model_validate_json((item / RESULT_NAME).read_text())
    assert final.error == "checker error: still broken" and queue_status(queue) == {"pending": 0, "done": 1}
    assert answers == [None]  # a third pass has nothing to do


def test_the_heldout_check_judges_the_frozen_source_that_ships_not_a_sweep_on_the_heldout_shapes(
        op_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A tunable winner's held-out check was handed its TUNE source, so the GPU host swept it again on the
    held-out shapes: the verdict was on a table tuned on the shapes meant to be unseen, not on what ships,
    and it cost a GPU sweep (H100, 2026-12-06). The check must get best/'s frozen text and sweep nothing."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    runs, queue = tmp_path / "runs", tmp_path / "queue"
    tunable = (Path(__file__).parent / "candidates" / "merge_state" / "tunable" / "rows_x_warps.py").read_text()
    s = Script()
    s.add("testing", final(suite_reply()))
    s.add("profiling", final(diagnosis_reply()))
    s.add("planning", final(plan_reply("r1")))
    s.add("coding", final(code_reply(tunable, "rows per program, swept")))
    speedups = {"r000-original": 1.0, "r001": 1.5, "r001-heldout": 1.4}
    with FakeOpenAIServer(s, api_key=API_KEY) as srv:
        args = optimize_args(op_dir, runs, srv.url, "--rounds", "1", "--eval-queue", str(queue), "--run-id", "t1")
        env = loop_env(interpret=False)
        for _ in range(4):  # each pass answers what the run queued, as the GPU host's `evaluate QUEUE` would
            done = run_cli(args if _ == 0 else ["optimize", "--resume", "t1", "--runs-dir", str(runs), "--no-live"],
                           env)
            if done.returncode != 3:
                break
            answer_queue(queue, op_dir, speedups)
    assert done.returncode == 0, done.stdout + done.stderr
    run = only_run(runs)
    shipped = (run / "best" / "merge_state.py").read_text()
    assert "TUNE frozen by astra-sglang tune" in shipped and "\nTUNE = " not in shipped
    held = queue / "t1--r001-heldout"
    assert (held / "candidate.py").read_text() == shipped  # the held-out check judged the shipped text
    assert EvalResult.model_validate_json((held / RESULT_NAME).read_text()).sweep is None  # and swept nothing
    assert json.loads((run / "run.json").read_text())["winner"]["heldout_ok"] is True


def test_a_host_whose_contract_differs_from_the_runs_refuses_its_items_before_any_work(
        op_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A queue item names its op by name, and the GPU host judges it against its own extracted/<op>. A run made on
    a revised contract (pending/, 2026-12-06: decode attention at S+9 with q in the qkv rows) and evaluated where
    the old one is checked in would have been timed on shapes it was never meant for, silently. The item now
    carries the manifest digest it was made against; another contract there is one clear error, nothing run."""
    import shutil

    from astra_sglang.errors import AstraError
    from astra_sglang.loop.evaluator import process_queue

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    queue = tmp_path / "queue"
    with pytest.raises(EvalPending):
        QueueEvaluator(op_dir, queue, "run1").evaluate("r000-original", None, EvalSpec(shapes="test", device="cpu"))
    request = QueueRequest.model_validate_json((queue / "run1--r000-original" / REQUEST_NAME).read_text())
    assert request.verdict_sha256
    host = tmp_path / "host" / op_dir.name
    shutil.copytree(op_dir, host)
    raw = json.loads((host / "manifest.json").read_text())
    raw["shapes"] = raw["shapes"][:-1]  # another revision of the contract: one shape fewer
    (host / "manifest.json").write_text(json.dumps(raw, indent=2))
    with pytest.raises(AstraError, match="another contract of merge_state"):
        process_queue(queue, host.parent)
    assert not (queue / "run1--r000-original" / RESULT_NAME).exists()
    # the run's own contract there: evaluated as before
    done = process_queue(queue, op_dir.parent)
    assert [item for item, _ in done] == ["run1--r000-original"]
