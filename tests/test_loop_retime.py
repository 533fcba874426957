"""A run whose evaluations land on different GPUs ranks like for like.

The device pool hands out H100s and H200s. A speedup is a ratio against SGLang's kernel timed beside it on one
GPU, and the same kernel measured 1.755x on an H200 and 1.549x on an H100 (2026-12-05), so ratios from two GPUs
do not rank candidates. The run ranks on the GPU of its latest candidates; a round's base is timed again beside
the round's candidates when they run on another GPU than the one its speed was ranked on (the GPU host does it
in the same pass, and answers "not re-timed" at once where it has that GPU).

The times here are SCRIPTED (``INJECTED BY TEST``): this host has no GPU. The queue test plays the GPU host with
the real ``process_queue`` and the harness's real correctness verdicts, then adds timing it did not measure.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAIServer, Script, final
from loop_support import (
    API_KEY,
    INJECTED,
    candidate,
    code_reply,
    diagnosis_reply,
    inject_timing,
    loop_env,
    merge_state_dir,
    only_run,
    optimize_args,
    plan_reply,
    run_cli,
    suite_reply,
)

from astra_sglang.contract.result import EvalResult
from astra_sglang.loop.evaluator import REQUEST_NAME, RESULT_NAME, list_queue, process_queue
from astra_sglang.loop.records import NOT_RETIMED, QueueRequest, Retime, RoundRecord
from astra_sglang.loop.winner import contenders, mixed_gpus_note, pick_base, ranked, ranking_gpu
from astra_sglang.platform_info import Platform

pytestmark = pytest.mark.timeout(500)
H200, H100 = f"{INJECTED}: NVIDIA H200", f"{INJECTED}: NVIDIA H100 80GB HBM3"


def _rec(rnd: int, speed: float | None, gpu: str | None, cand: int | None = None, base: tuple[int, int | None] = (0, None),
         retime: Retime | None = None) -> RoundRecord:
    return RoundRecord(round=rnd, candidate=cand, status="ok", correct=True, geomean_speedup=speed,
                       timing_source=f"{gpu} (sm_90); cuda-graph replay" if gpu else None,
                       base_round=base[0], base_candidate=base[1], retimes=[retime] if retime else [],
                       candidate_file=f"rounds/r{rnd:03d}/candidate.py")


def test_a_base_re_timed_on_the_new_gpu_competes_with_that_time_not_its_old_one():
    r0 = _rec(0, 1.0, None)
    r1 = _rec(1, 1.8, H200)  # 1.8x against SGLang's kernel on the H200
    r2 = _rec(2, 1.5, H100, base=(1, None), retime=Retime(of_round=1, gpu=H100, geomean_speedup=1.3))
    records = [r0, r1, r2]
    assert ranking_gpu(records) == H100
    assert pick_base(records) is r2  # 1.5 beats round 1's 1.3 on the H100; its 1.8 came from the H200
    assert [r.round for r in ranked(records)] == [2, 1]


def test_a_candidate_timed_only_on_another_gpu_does_not_compete_and_is_named():
    """K=4 round 1 of the decode-attention run: c0 on the H200, c1-c3 on the H100 (2026-12-05)."""
    r0 = _rec(0, 1.0, None)
    round1 = [_rec(1, 1.6, H200, cand=0), _rec(1, 1.2, H100, cand=1), _rec(1, 0.7, H100, cand=2),
              _rec(1, 1.1, H100, cand=3)]
    records = [r0, *round1]
    assert pick_base(records) is round1[1]
    assert [r.candidate for r in ranked(records)] == [1, 3, 2]
    note = mixed_gpus_note(records)
    assert note is not None and f"the ranking uses times from {H100} only" in note
    assert note.endswith(f"not competing, timed only on another GPU: {round1[0].key}")
    # Round 2 times again the fastest of round 1 on each GPU (its base, c1, is the H100's): whichever GPU the pass
    # gets, both then stand on it. Each is marked with the GPU its standing time is from.
    assert [(r.candidate, gpu) for r, gpu in contenders(records, round1[1])] == [(1, H100), (0, H200)]
    r2 = _rec(2, 1.3, H100, cand=0, base=(1, 1), retime=Retime(of_round=1, of_candidate=0, gpu=H100, geomean_speedup=1.25))
    assert pick_base([*records, r2]) is r2 and mixed_gpus_note([*records, r2]) is not None
    assert "not competing" not in (mixed_gpus_note([*records, r2]) or "")  # c0 now has an H100 time: it competes


def test_one_gpu_ranks_as_before():
    r0, r1, r2 = _rec(0, 1.0, None), _rec(1, 1.8, H200), _rec(2, 1.5, H200, base=(1, None))
    assert pick_base([r0, r1, r2]) is r1 and mixed_gpus_note([r0, r1, r2]) is None
    untimed = [_rec(0, None, None), _rec(1, None, None), _rec(2, None, None)]
    assert pick_base(untimed) is untimed[2] and ranked(untimed) == []  # a CPU run: the latest correct kernel


# ------------------------------------------------------------------------------------------ through the queue
SPEEDUPS = {"r000-original": 1.0, "r001": 1.8, "r002": 1.5, "r002-base": 1.3, "r003": 0.7, "r002-heldout": 1.4}
GPU_OF = {"r000-original": H200, "r001": H200}  # every later label: the H100


@pytest.fixture(scope="module")
def op_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return merge_state_dir(tmp_path_factory.getbasetemp())


def _gpu_host(queue: Path, extracted: Path, stop: threading.Event, timed: list[str], answered: list[str],
              monkeypatch: pytest.MonkeyPatch, speedups: dict[str, float] = SPEEDUPS,
              gpu_of: dict[str, str] = GPU_OF) -> None:
    """`evaluate QUEUE` (process_queue, for real) on a host whose GPU depends on the round it is asked for; the
    harness's verdicts are real (CPU, interpreter), their timing and device are SCRIPTED."""
    import astra_sglang.harness as harness
    from astra_sglang import platform_info

    real = harness.evaluate_many

    def judged(op, candidates, config=None, on_result=None):
        def keep(i, result):
            label = Path(candidates[i]).parent.name.split("--", 1)[1] if candidates[i] else "r000-original"
            timed.append(label)
            gpu = gpu_of.get(label, H100)
            result = inject_timing(result, speedups[label]).model_copy(update={"device": f"{gpu} (sm_90)"})
            on_result(i, result)
        return real(op, candidates, config, on_result=keep)

    monkeypatch.setattr(harness, "evaluate_many", judged)
    while not stop.is_set():
        pending = [r.label for _, r, res in list_queue(queue) if res is None]
        if pending:
            gpu = gpu_of.get(pending[0], H100)
            monkeypatch.setattr(platform_info, "current", lambda gpu=gpu: Platform(arch="sm_90", name=gpu))
            answered += [item.split("--", 1)[1] for item, _ in process_queue(queue, extracted)]
        time.sleep(0.2)


def _run_beside_gpu_host(op_dir: Path, runs: Path, queue: Path, script: Script, rounds: str, run_id: str,
                         monkeypatch: pytest.MonkeyPatch, speedups: dict[str, float] = SPEEDUPS
                         ) -> tuple[subprocess.CompletedProcess, list[str], list[str]]:
    """A queue run of ``rounds`` rounds while this process plays the GPU host; the run must end (exit 0)."""
    stop = threading.Event()
    timed: list[str] = []
    answered: list[str] = []
    host = threading.Thread(target=_gpu_host, args=(queue, op_dir.parent, stop, timed, answered, monkeypatch,
                                                    speedups), daemon=True)
    host.start()
    try:
        with FakeOpenAIServer(script, api_key=API_KEY) as srv:
            out = run_cli(optimize_args(op_dir, runs, srv.url, "--rounds", rounds, "--eval-queue", str(queue),
                                        "--run-id", run_id, "--eval-wait-s", "300"), loop_env(interpret=False),
                          timeout=480)
    finally:
        stop.set()
        host.join(timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return out, timed, answered


def test_the_queue_re_times_the_base_where_the_round_ran_on_another_gpu(op_dir: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # this process plays the GPU host
    runs, queue = tmp_path / "runs", tmp_path / "queue"
    s = Script()
    s.add("testing", final(suite_reply()))
    s.add("profiling", final(diagnosis_reply()), final(diagnosis_reply("round 2")), final(diagnosis_reply("round 3")))
    s.add("planning", final(plan_reply("r1")), final(plan_reply("r2")), final(plan_reply("r3")))
    s.add("coding", final(code_reply(candidate("r5.py"), "big tiles")), final(code_reply(candidate("r3.py"), "chunks")),
          final(code_reply(candidate("r4.py"), "rows")))
    out, timed, answered = _run_beside_gpu_host(op_dir, runs, queue, s, "3", "rt", monkeypatch)
    # Round 2 ran on the H100: its base (round 1, timed on the H200) was timed beside it in the same pass. Round 3
    # ran on the H100 too, where its base (round 2) already had times: the host answered without running it.
    assert timed == ["r000-original", "r001", "r002", "r002-base", "r003", "r002-heldout"]
    assert "r003-base" in answered and "r003-base" not in timed
    assert not list(queue.glob("*retime*"))  # the latest round's fastest was each round's base here
    base3 = queue / "rt--r003-base"
    assert QueueRequest.model_validate_json((base3 / REQUEST_NAME).read_text()).retime_unless_on == H100
    assert (EvalResult.model_validate_json((base3 / RESULT_NAME).read_text()).error or "").startswith(NOT_RETIMED)

    run = only_run(runs)
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert [(r["round"], r["geomean_speedup"]) for r in log] == [(0, 1.0), (1, 1.8), (2, 1.5), (3, 0.7)]
    assert log[2]["retimes"] == [{"of_round": 1, "of_candidate": None, "gpu": H100, "geomean_speedup": 1.3,
                                  "correct": True, "timing_source": f"{H100} (sm_90); {INJECTED}"}]
    assert "retimes" not in log[3]
    # Without the re-time, round 1's 1.8x (H200) would have been round 3's base; on the H100 round 2 is faster.
    assert [r["base_round"] for r in log[1:]] == [0, 1, 2]
    winner = json.loads((run / "run.json").read_text())["winner"]
    assert winner["round"] == 2 and winner["heldout_ok"] is True
    assert f"the ranking uses times from {H100} only" in winner["reason"]
    assert "timed again on" in out.stdout


def test_a_winner_re_timed_on_the_ranking_gpu_is_reported_and_kept_with_those_times(op_dir: Path, tmp_path: Path,
                                                                                    monkeypatch: pytest.MonkeyPatch):
    """Round 1 timed 1.8x on the H200 and 1.6x re-timed on the H100 the run ranks on: it wins by 1.6x, so the
    winner, best/result.json and the sweep comparison say 1.6x on the H100 (the decode-attention run reported
    the H200's 1.755x beside the H100's sweep baseline, 2026-12-06); the H200 result is kept beside it."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    runs, queue = tmp_path / "runs", tmp_path / "queue"
    speedups = {"r000-original": 1.0, "r001": 1.8, "r002": 1.2, "r002-base": 1.6, "r001-heldout": 1.5}
    s = Script()
    s.add("testing", final(suite_reply()))
    s.add("profiling", final(diagnosis_reply()), final(diagnosis_reply("round 2")))
    s.add("planning", final(plan_reply("r1")), final(plan_reply("r2")))
    s.add("coding", final(code_reply(candidate("r5.py"), "big tiles")), final(code_reply(candidate("r3.py"), "chunks")))
    out, timed, _ = _run_beside_gpu_host(op_dir, runs, queue, s, "2", "rw", monkeypatch, speedups)
    assert timed == ["r000-original", "r001", "r002", "r002-base", "r001-heldout"]
    run = only_run(runs)
    winner = json.loads((run / "run.json").read_text())["winner"]
    assert winner["round"] == 1 and winner["geomean_speedup"] == pytest.approx(1.6)
    assert winner["timing_source"].startswith(f"{H100} (sm_90)")
    best = EvalResult.model_validate_json((run / "best" / "result.json").read_text())
    own = EvalResult.model_validate_json((run / "best" / "result.own-gpu.json").read_text())
    assert (best.device, best.geomean_speedup) == (f"{H100} (sm_90)", pytest.approx(1.6))
    assert (own.device, own.geomean_speedup) == (f"{H200} (sm_90)", pytest.approx(1.8))
    assert "winner: round 1, 1.600x geomean" in out.stdout


def test_a_local_run_resumed_on_another_gpu_measures_again_instead_of_reusing_the_old_gpus_result(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The local evaluator caches results by (candidate, spec). A run resumed on another GPU got the old GPU's
    timed result back for the same candidate, so its base "re-time" would have been the old time again."""
    import astra_sglang.harness as harness
    from astra_sglang import platform_info
    from astra_sglang.contract.result import BuildReport, CorrectnessReport
    from astra_sglang.loop.evaluator import LocalEvaluator
    from astra_sglang.loop.records import EvalSpec

    op = merge_state_dir(tmp_path)
    src = tmp_path / "k.py"
    src.write_text(candidate("r4.py"))
    spec = EvalSpec(shapes="paper", device="cuda")
    runs: list[str] = []

    def harness_on(gpu: str):
        def fake(op_dir, candidates, config=None, on_result=None):
            runs.append(gpu)
            r = inject_timing(EvalResult(op_id="x", device="cpu", sglang_version="0", build=BuildReport(ok=True),
                                         correctness=CorrectnessReport(ok=True)), 1.2)
            return [r.model_copy(update={"device": f"{gpu} (sm_90)"}) for _ in candidates]
        monkeypatch.setattr(harness, "evaluate_many", fake)
        monkeypatch.setattr(platform_info, "current", lambda: Platform(arch="sm_90", name=gpu))

    ev = LocalEvaluator(op, cache_dir=tmp_path / "evals")
    harness_on(H200)
    assert ev.evaluate("r001", src, spec).device == f"{H200} (sm_90)"
    assert ev.evaluate("r001", src, spec).device == f"{H200} (sm_90)" and runs == [H200]  # cached on its own GPU
    harness_on(H100)
    assert ev.evaluate("r002-base", src, spec).device == f"{H100} (sm_90)" and runs == [H200, H100]


def test_best_per_round_and_the_stopping_rule_use_the_ranking_gpus_times():
    """The single-agent decode-attention run: round 1 1.755x on the H200, re-timed 1.534x on the H100 beside
    round 2's 1.373x (2026-12-05). Its report said best so far 1.755x, an H200 ratio in an H100-ranked run, and
    --patience counted from it. Both now read each round's best on the ranking GPU."""
    from astra_sglang.loop.stopping import best_per_round, stop_reason

    r0 = _rec(0, 1.0, None)
    r1 = _rec(1, 1.755, H200)
    r2 = _rec(2, 1.373, H100, base=(1, None), retime=Retime(of_round=1, gpu=H100, geomean_speedup=1.534))
    assert best_per_round([r0, r1, r2]) == [(1, 1.534), (2, 1.373)]
    assert stop_reason([r0, r1, r2], patience=1, margin=None) == (
        "1 round(s) without gain over 1.534x (--patience 1)")
    # a round timed only on another GPU and never re-timed has no best on the ranking GPU
    r3 = _rec(3, 1.2, H100, base=(1, None))
    assert best_per_round([r0, r1, r3]) == [(1, None), (3, 1.2)]
