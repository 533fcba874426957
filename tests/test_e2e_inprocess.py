"""``astra-sglang e2e --in-process`` on CPU with a STAND-IN of SGLang's one_batch (tests/standin/inprocess_standin.py,
labelled: no SGLang, no model): the real child and parent, one process, arms switched by recapturing the decode
graphs, and the same report and checks as the cross-process run. Not yet run on the H200."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from astra_sglang.cli.main import main

pytest.importorskip("numpy")

STANDIN = Path(__file__).resolve().parent / "standin" / "inprocess_standin.py"


def _e2e(out: Path, *extra: str, rounds: int = 4) -> list[str]:
    return ["e2e", "--in-process", "--rounds", str(rounds), "--out", str(out), "--forward", str(STANDIN),
            "--batch-size", "1", "64", "--json", *extra, "--", "--model-path", "standin-model"]


def _lines(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "inprocess" / "arms.jsonl").read_text().splitlines()]


def test_a_ten_percent_faster_patch_is_a_gain_in_one_process_with_the_placebo_holding(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_e2e(out)) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["config"]["in_process"] and rep["rounds_done"] == 4 and not rep["problems"]
    assert rep["verdict"] == "gain"
    for s in rep["shapes"]:
        ba, ca = s["decode"]["b_over_a"], s["decode"]["c_over_a"]
        assert ba["high"] < 1.0 and ba["ratio"] == pytest.approx(0.9, abs=0.01)
        assert ca["low"] <= 1.0 <= ca["high"] and ca["high"] - ca["low"] < 0.02   # one process: narrow
    lines = _lines(out)
    assert len(lines) == 2 * 4 * 3                                 # 2 shapes x 4 rounds x 3 arms, no warm-up
    assert [x["arm"] for x in lines[:3]] == ["A", "B", "C"] and [x["arm"] for x in lines[3:6]] == ["B", "C", "A"]
    for x in lines:                                                # every arm-run recaptured, and ran its kernel
        (p,) = x["patches"]
        assert x["graphs"] is True
        if x["arm"] == "B":
            assert p["served_by_patch"] > 0 and p["served_by_original"] == 0
        else:
            assert p["served_by_patch"] == 0 and p["served_by_original"] > 0
    assert (out / "inprocess" / "done.json").is_file()
    # reported again without running anything
    assert main(["e2e", "--report-only", "--out", str(out), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["verdict"] == "gain" and "report only: in-process" in again["stopped"]


def test_a_cut_run_counts_only_the_rounds_every_batch_size_finished(tmp_path, capsys):
    """The child runs each batch size's rounds in turn, so a run cut by its limit holds all rounds of the first
    and a few of the last. Its report once said "8 rounds" where batch 128 had 3 (H100, 2026-12-07)."""
    out = tmp_path / "run"
    assert main(_e2e(out)) == 0
    capsys.readouterr()
    arms = out / "inprocess" / "arms.jsonl"
    lines = arms.read_text().splitlines()
    assert {json.loads(x)["result"]["batch_size"] for x in lines[:12]} == {1}  # batch 1's 4 rounds first
    arms.write_text("\n".join(lines[:12 + 5]) + "\n")  # batch 64: round 1, and two arms of round 2
    (out / "inprocess" / "done.json").unlink()
    assert main(["e2e", "--report-only", "--out", str(out), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["rounds_done"] == 1
    assert rep["stopped"] == "report only: in-process, 1 rounds of arm-runs read (the process cut before it finished)"


def test_a_deadline_is_shared_among_the_batch_shapes_so_none_is_starved(tmp_path):
    """one_batch measures its shapes in turn, so a limit that strikes mid-run once left 8 rounds of the first
    batch size and 3 of the last. With a deadline each shape gets an equal share of the time left when it starts,
    and stops after the last whole round that fits (a fake clock: the first shape's arm-runs take 2 s, the
    second's 3 s, the warm-up 6 s)."""
    from astra_sglang.e2e.inprocess_child import InProcessAB, shape_count

    assert shape_count(["--model-path", "m", "--batch-size", "32", "128", "--input-len", "1024"]) == 2
    assert shape_count(["--batch-size", "1", "8", "--input-len", "512", "1024", "--output-len", "32"]) == 4
    assert shape_count(["--model-path", "m"]) == 1

    def run(deadline: float | None) -> tuple[dict[int, set[int]], float]:
        now = [0.0]
        cost = {0: 6.0, 32: 2.0, 128: 3.0}
        calls: list[int] = []

        def real(run_name, model_runner, bs):
            now[0] += cost[bs if calls else 0]
            calls.append(bs)
            return {"batch_size": bs, "median_decode_latency": 0.01, "prefill_latency": 0.1}

        out = tmp_path / f"arms-{deadline}.jsonl"
        ab = InProcessAB(real, 8, out, deadline=deadline, shapes=2, clock=lambda: now[0])
        for bs in (32, 32, 128):  # one_batch: its warm-up at the first shape, then one call per shape
            ab("run", object(), bs)
        rounds: dict[int, set[int]] = {}
        for line in map(json.loads, out.read_text().splitlines()):
            rounds.setdefault(line["result"]["batch_size"], set()).add(line["round"])
        return rounds, now[0]

    rounds, ended = run(None)
    assert rounds == {32: set(range(1, 9)), 128: set(range(1, 9))}
    rounds, ended = run(60.0)
    # batch 32: a share of (60 - 6) / 2 = 27 s holds 4 rounds of 6 s; batch 128: the 30 s left hold 3 of 9 s
    assert rounds == {32: {1, 2, 3, 4}, 128: {1, 2, 3}} and ended <= 60.0


def test_a_run_longer_than_its_timeout_ends_in_time_with_rounds_at_every_batch_size(tmp_path, capsys, monkeypatch):
    """6 rounds of 2 shapes at 0.4 s an arm-run need 14.4 s; --timeout 12 killed such a run before it reported.
    The child now shares the time left among the shapes and the report says fewer rounds were held than asked."""
    monkeypatch.setenv("STANDIN_ARM_SECONDS", "0.4")
    out = tmp_path / "run"
    argv = _e2e(out, rounds=6)
    assert main(argv[:-3] + ["--timeout", "12", *argv[-3:]]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert 1 <= rep["rounds_done"] < 6
    assert "(6 asked: --timeout 12 s, shared among the batch shapes, held fewer)" in rep["stopped"]
    per_bs: dict[int, set[int]] = {}
    for x in _lines(out):
        per_bs.setdefault(x["result"]["batch_size"], set()).add(x["round"])
    assert set(per_bs) == {1, 64} and all(per_bs.values())  # no shape starved
    assert "rounds in its share of the time left" in (out / "inprocess" / "stderr.log").read_text()


def test_an_arm_run_whose_graphs_were_not_recaptured_is_caught(tmp_path, capsys, monkeypatch):
    """A recapture that silently kept the old graphs leaves that arm-run replaying the previous arm's kernel (here
    the 2nd arm-run, B, replays A's graphs): its timing belongs to another arm. Said, and no gain counted."""
    monkeypatch.setenv("STANDIN_NO_RECAPTURE", "2")
    out = tmp_path / "run"
    assert main(_e2e(out)) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["verdict"] != "gain"
    assert any("round 1's B arm-run made no hooked call inside its graph recapture" in p for p in rep["problems"])


def test_an_in_process_forward_out_of_memory_is_named_with_what_to_change(tmp_path, capsys, monkeypatch):
    """H100, 2026-12-06: batch 32 at context 8160 died in its one-batch prefill, and e2e said only "exited with 1;
    see stderr.log" (the cross-process run already named the exception)."""
    monkeypatch.setenv("STANDIN_OOM_BS", "64")
    assert main(_e2e(tmp_path / "run")) != 0
    err = capsys.readouterr().err
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.97 GiB" in err
    assert "prefills the whole batch at once" in err and "Traceback" not in err


def test_too_few_arm_runs_are_named_as_arm_runs_not_processes(tmp_path, capsys):
    """H100, 2026-12-06: 3 in-process rounds, B/A 0.835, and the verdict spoke of "3 and 3 processes": there was one."""
    assert main(_e2e(tmp_path / "run", rounds=3)) == 0
    rep = json.loads(capsys.readouterr().out)
    why = " ".join(r for s in rep["shapes"] for r in s["decode"]["reasons"])
    assert rep["verdict"] == "no measurable change"
    assert "from 3 and 3 arm-runs" in why and "4 arm-runs per arm at least" in why and "processes" not in why


def test_a_prefill_too_large_for_one_forward_runs_in_groups_with_the_full_batch_decoding(tmp_path, capsys,
                                                                                        monkeypatch):
    """H100, 2026-12-06: batch 32 at context 8160 could not be measured (its one-shot prefill ran out of memory at
    every pool size that holds its KV). --prefill-chunk-tokens prefills groups of requests and merges them into the
    one decode batch; the stand-in dies on any one extend over 32 tokens and checks every request reaches decode."""
    monkeypatch.setenv("STANDIN_PREFILL_LIMIT", "32")
    args = ["e2e", "--in-process", "--rounds", "4", "--forward", str(STANDIN), "--batch-size", "1", "4",
            "--input-len", "16", "--json"]
    assert main([*args, "--out", str(tmp_path / "one-shot"), "--", "--model-path", "m"]) != 0
    assert "CUDA out of memory" in capsys.readouterr().err
    monkeypatch.setenv("ASTRA_PREFILL_CHUNK_TOKENS", "8")  # a user's own setting never leaks into a run
    assert main([*args, "--out", str(tmp_path / "leak"), "--", "--model-path", "m"]) != 0
    capsys.readouterr()
    out = tmp_path / "grouped"
    assert main([*args, "--prefill-chunk-tokens", "32", "--out", str(out), "--", "--model-path", "m"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["verdict"] == "gain" and rep["config"]["prefill_chunk_tokens"] == 32
    groups = {x["result"]["batch_size"]: x["prefill_groups"] for x in _lines(out)}
    assert groups == {1: [1], 4: [2, 2]}
    # a resumed run with another grouping is another measurement
    assert main([*args, "--prefill-chunk-tokens", "16", "--out", str(out), "--", "--model-path", "m"]) != 0
    assert "another measurement (different prefill_chunk_tokens)" in capsys.readouterr().err


def test_prefill_groups_keep_request_order_and_never_split_a_request():
    from types import SimpleNamespace

    from astra_sglang.profile.chunked_prefill import groups

    reqs = [SimpleNamespace(i=i, origin_input_ids=[0] * n) for i, n in enumerate([5, 5, 5, 12, 3, 3])]
    got = [[r.i for r in g] for g in groups(reqs, 10)]
    assert got == [[0, 1], [2], [3], [4, 5]]
    assert [[r.i for r in g] for g in groups(reqs, 100)] == [[0, 1, 2, 3, 4, 5]]


def test_the_chunked_prefill_patches_what_sglangs_one_batch_really_has():
    """Read from the installed SGLang's source (its import needs a GPU stack): one_batch's runner class, its
    ``extend(self, reqs)``, the batch it returns from ``extend`` and ScheduleBatch's ``merge_batch``."""
    import ast
    import importlib.util

    from astra_sglang.profile.chunked_prefill import RUNNER_CLASS

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("SGLang is not installed here")
    root = Path(next(iter(spec.submodule_search_locations)))
    tree = ast.parse((root / "benchmark" / "one_batch.py").read_text())
    runner = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == RUNNER_CLASS)
    extend = next(n for n in runner.body if isinstance(n, ast.FunctionDef) and n.name == "extend")
    assert [a.arg for a in extend.args.args] == ["self", "reqs"]
    plain = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "extend")
    ret = [n for n in ast.walk(plain) if isinstance(n, ast.Return)][-1]
    assert isinstance(ret.value, ast.Tuple) and len(ret.value.elts) == 3 and ast.unparse(ret.value.elts[2]) == "batch"
    assert "def merge_batch(self, other" in (root / "srt" / "managers" / "schedule_batch.py").read_text()


def test_the_one_batch_child_patches_one_batch_before_running_it(monkeypatch):
    """The cross-process forward (profile and e2e) runs one_batch as __main__ without the variable, and imports it,
    replaces its runner's extend, then runs its cli_main with it."""
    import sys
    import types

    from astra_sglang.profile import one_batch_child

    ran: list[str] = []

    class Runner:
        def extend(self, reqs):
            return reqs, None, None

    fake = types.SimpleNamespace(_TorchBenchRunner=Runner, cli_main=lambda: ran.append(
        "cli_main" if getattr(Runner.extend, "astra_chunked", False) else "unpatched"))
    plugins = types.ModuleType("sglang.srt.plugins")
    plugins.load_plugins = lambda: None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sglang.srt.plugins", plugins)
    monkeypatch.setattr(one_batch_child, "_imported", lambda: fake)
    monkeypatch.setattr(one_batch_child, "_run_as_main", lambda: ran.append("runpy"))
    monkeypatch.setattr(one_batch_child.atexit, "register", lambda *a, **k: None)
    from astra_sglang.profile import gpu_state

    monkeypatch.setattr(gpu_state, "start_for_this_process", lambda: None)
    monkeypatch.setattr(sys, "argv", ["x"])
    monkeypatch.delenv("ASTRA_PREFILL_CHUNK_TOKENS", raising=False)
    one_batch_child.main()
    monkeypatch.setenv("ASTRA_PREFILL_CHUNK_TOKENS", "4096")
    one_batch_child.main()
    assert ran == ["runpy", "cli_main"]


def test_the_patch_serves_again_after_the_arms(tmp_path):
    """The child leaves the patches as it found them: whatever runs after the measurement is served by them."""
    from astra_sglang.e2e.inprocess_child import InProcessAB
    from astra_sglang.patches import status

    status.reset()
    st = status.get("p1", "op")
    st.state = "active"
    seen = []

    def real(run_name, runner, *args):
        seen.append(st.state)
        return {"batch_size": 1, "input_len": 8, "output_len": 4, "prefill_latency": 1.0,
                "median_decode_latency": 1.0}

    ab = InProcessAB(real, 2, tmp_path / "arms.jsonl")
    ab("warmup", object())
    ab("x", object())
    assert seen == ["active", "disabled", "active", "disabled", "active", "disabled", "disabled"]
    assert st.state == "active"
    status.reset()


def test_the_report_sets_the_kernel_records_forecast_beside_the_measured_step(tmp_path, capsys, monkeypatch):
    """Before the run, e2e takes from ``patches coverage`` what each batch size's step should lose by the serving
    patches' records (stop 57, H100: every forecast inside its measured interval) and keeps it in the run folder;
    the report says whether the measured B/A holds it. The stand-in's patch makes the step 10% faster: a forecast of
    10% holds, one of 2.4% at batch 64 is missed, and the verdict stays the measurement's."""
    from astra_sglang.profile import coverage as cov
    from astra_sglang.profile.coverage import StepSaving

    parts = ["decode_attention by standin-patch: 32 calls x 31.6 us (a STAND-IN record)"]
    monkeypatch.setattr(cov, "forward_savings", lambda found: ("NVIDIA H100 80GB HBM3", [
        StepSaving(phase="decode", batch_size=1, saved_us=1010.0, parts=parts),
        StepSaving(phase="decode", batch_size=64, saved_us=400.0, parts=parts)]))
    out = tmp_path / "run"
    assert main(_e2e(out)) == 0
    rep = json.loads(capsys.readouterr().out)
    got = {f["batch_size"]: f for f in rep["forecast"]}
    assert got[1]["predicted"] == pytest.approx(0.9, abs=0.005) and got[1]["holds"] is True
    assert got[64]["predicted"] == pytest.approx(1 - 400 / 16400, abs=0.002) and got[64]["holds"] is False
    assert rep["verdict"] == "gain"
    assert any(r.startswith("not as the kernel records forecast: bs 64 0.976 outside") for r in rep["reasons"])
    monkeypatch.setattr(cov, "forward_savings", lambda found: None)
    assert main(["e2e", "--report-only", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "forecast: bs 1: the kernel records forecast B/A 0.900 (1,010 us off A's 10.09" in text and "holds it" in text
    assert "bs 64: the kernel records forecast B/A 0.976" in text and "MISSES it" in text
    # a forecast file this version cannot read (stop 58's first format) is named, not dropped without a word
    (out / "forecast.json").write_text(json.dumps({"forecasts": [{"batch_size": 1, "saved_us": 1010.0}]}))
    assert main(["e2e", "--report-only", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "is not a forecast this version reads, so no forecast was judged" in text and "holds it" not in text


def test_each_prompt_length_is_judged_against_its_own_forecast(tmp_path, capsys, monkeypatch):
    """A run at two prompt lengths has two batch shapes per batch size, and a forecast for each (the KV length picks
    the record). The report matched forecasts by batch size alone: the one made at the first prompt length was
    judged against whichever shape came last. Now each against its own shape; a forecast naming no lengths (a run
    folder from before) is judged only where its batch size has one shape. STAND-IN forward and records."""
    from astra_sglang.profile import coverage as cov
    from astra_sglang.profile.coverage import StepSaving

    parts = ["decode_attention by standin-patch: a STAND-IN record"]
    monkeypatch.setattr(cov, "forward_savings", lambda found: ("NVIDIA H100 80GB HBM3", [
        StepSaving(phase="decode", batch_size=1, input_len=8, output_len=16, saved_us=1010.0, parts=parts),
        StepSaving(phase="decode", batch_size=1, input_len=64, output_len=16, saved_us=400.0, parts=parts),
        StepSaving(phase="decode", batch_size=64, saved_us=1640.0, parts=parts)]))
    out = tmp_path / "run"
    assert main(_e2e(out, "--input-len", "8", "64", "--output-len", "16")) == 0
    rep = json.loads(capsys.readouterr().out)
    got = {(f["batch_size"], f["input_len"]): f for f in rep["forecast"]}
    assert set(got) == {(1, 8), (1, 64)}  # bs 64's forecast names no length and bs 64 ran two: not judged
    assert got[(1, 8)]["holds"] is True and got[(1, 64)]["holds"] is False
    assert any(r.startswith("not as the kernel records forecast: bs 1 (in 64, out 16) 0.960 outside")
               for r in rep["reasons"]), rep["reasons"]
