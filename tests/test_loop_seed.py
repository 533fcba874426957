"""A seeded run (`optimize --seed-kernel FILE`): round 1 judges an earlier run's winner instead of asking the model,
and the rounds after it go on from it. The model's answers are SCRIPTED (the file: provider, answered by this test),
the candidates are the scripted merge_state kernels, and the harness is real (CPU, TRITON_INTERPRET=1, untimed)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAIServer, Script, final, role_of, tool_call
from loop_support import (
    API_KEY,
    answer_files,
    answer_queue,
    candidate,
    code_reply,
    diagnosis_reply,
    loop_env,
    merge_state_dir,
    only_run,
    optimize_args,
    plan_reply,
    run_cli,
    single_reply,
    suite_reply,
)
from test_loop_queue import _as_file_answer

from astra_sglang.cli.main import main

pytestmark = pytest.mark.timeout(500)


@pytest.fixture(scope="module")
def op_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return merge_state_dir(tmp_path_factory.getbasetemp())


def test_round_one_judges_the_seed_without_the_model_and_round_two_goes_on_from_it(
        op_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    runs, inbox = tmp_path / "runs", tmp_path / "inbox"
    seed = tmp_path / "winner_of_an_earlier_run.py"
    seed.write_text(candidate("r4.py"))
    s = Script()
    s.add("single", final(suite_reply(extra_invalid=False)),
          tool_call("check_candidate", {"source": candidate("r3.py")}), final(single_reply(candidate("r3.py"))))
    stop = threading.Event()
    t = threading.Thread(target=answer_files, args=(inbox, _as_file_answer(s), stop), daemon=True)
    t.start()
    try:
        rc = main(["optimize", str(op_dir), "--runs-dir", str(runs), "--model", f"file:{inbox}", "--single-agent",
                   "--rounds", "2", "--seed-kernel", str(seed), "--shapes", "test", "--device", "cpu", "--no-live",
                   "--file-timeout-s", "60", "--label", "SCRIPTED"])
    finally:
        stop.set()
        t.join(timeout=10)
    assert rc == 0
    seed.unlink()  # the run keeps its own copy
    run = only_run(runs)
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert [(r["round"], r["status"]) for r in log] == [(0, "ok"), (1, "ok"), (2, "ok")]
    assert log[1]["seed"].endswith("winner_of_an_earlier_run.py") and "not written by this run" in log[1]["changes"]
    assert log[1]["source"] == candidate("r4.py") and not log[1]["transcript"]
    assert log[2]["base_round"] == 1  # untimed here: the latest correct kernel, the seed
    requests = sorted(inbox.glob("*.request.json"))
    assert [role_of(json.loads(p.read_text())) for p in requests] == ["single", "single", "single"]  # suite, r2 x2
    round_two = json.loads(requests[1].read_text())
    said = " ".join(m["content"] for m in round_two["messages"] if isinstance(m.get("content"), str))
    assert "def _merge_tile_kernel(" in said  # the model was shown the seed (r4's kernel) to improve
    assert (run / "seed.py").read_text() == candidate("r4.py")
    assert json.loads((run / "run.json").read_text())["options"]["seed_kernel"].endswith("winner_of_an_earlier_run.py")


def test_a_seed_is_given_when_a_run_starts_and_must_exist(op_dir: Path, tmp_path: Path, capsys) -> None:
    for extra, says in ((["--resume", "x"], "keeps the seed it started with"),
                        ([str(op_dir)], "no such file")):
        rc = main(["optimize", *extra, "--seed-kernel", str(tmp_path / "none.py"), "--model", "file:/tmp/x"])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and says in err and len(err.splitlines()) == 1, err
    cuda = tmp_path / "k.cu"
    cuda.write_text("// not a Triton kernel\n")
    rc = main(["optimize", str(op_dir), "--runs-dir", str(tmp_path / "runs"), "--seed-kernel", str(cuda), "--model",
               f"file:{tmp_path / 'inbox'}", "--shapes", "test", "--device", "cpu", "--no-live"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "takes a .py candidate" in err, err
    assert not list((tmp_path / "runs").glob("*/*/run.json"))  # refused before a run folder was made


def test_a_seed_no_later_round_beats_wins_as_the_seed_never_as_this_runs_kernel(
        op_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Timings INJECTED BY TEST (a CPU host plays the GPU host, as in test_loop_queue.py): the seed 2.0x, round 2's
    candidate 1.5x. The winner is the seed, and the run says so instead of claiming it."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    runs, queue = tmp_path / "runs", tmp_path / "queue"
    seed = tmp_path / "seed_from_an_earlier_run.py"
    seed.write_text(candidate("r4.py"))
    s = Script()
    s.add("testing", final(suite_reply()))
    s.add("profiling", final(diagnosis_reply()))
    s.add("planning", final(plan_reply("r2")))
    s.add("coding", final(code_reply(candidate("r3.py"), "chunks")))
    speedups = {"r000-original": 1.0, "r001": 2.0, "r002": 1.5, "r001-heldout": 1.9}
    stop = threading.Event()

    def gpu_host() -> None:
        while not stop.is_set():
            answer_queue(queue, op_dir, speedups)
            stop.wait(0.2)

    host = threading.Thread(target=gpu_host, daemon=True)
    host.start()
    try:
        with FakeOpenAIServer(s, api_key=API_KEY) as srv:
            done = run_cli(optimize_args(op_dir, runs, srv.url, "--rounds", "2", "--eval-queue", str(queue),
                                         "--eval-wait-s", "200", "--seed-kernel", str(seed)), loop_env(interpret=False))
    finally:
        stop.set()
        host.join(timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    meta = json.loads((only_run(runs) / "run.json").read_text())
    assert meta["winner"]["round"] == 1 and meta["winner"]["reason"].startswith("the seed (round 1, not written by")
    from astra_sglang.errors import AstraError
    from astra_sglang.patches.tooling.add import add_from_run

    with pytest.raises(AstraError, match="winner is its seed .*register the run the seed came from"):
        add_from_run(only_run(runs), root=tmp_path / "patches")  # never registered as this run's kernel
