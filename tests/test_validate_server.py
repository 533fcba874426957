"""``astra-sglang validate`` on CPU against a STAND-IN server (tests/standin/sglang_standin.py, labelled as such:
no model, no GPU): real processes, real HTTP, the plugin's real status records; the H200 run is in
docs/measurements."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from astra_sglang.cli.main import main
from astra_sglang.serving.client import Completion
from astra_sglang.serving.compare import compare
from astra_sglang.serving.launch import free_port

STANDIN = Path(__file__).parent / "standin"
FAST = ["--max-tokens", "8", "--repeat", "1", "--load-rounds", "2", "--concurrency", "4"]


@pytest.fixture
def standin_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(STANDIN), os.environ.get("PYTHONPATH", "")]))
    for k in ("STANDIN_DIVERGE", "STANDIN_FALLBACK", "STANDIN_CRASH"):
        monkeypatch.delenv(k, raising=False)
    pidfile = tmp_path / "children.txt"
    monkeypatch.setenv("STANDIN_CHILD_PIDFILE", str(pidfile))
    return pidfile


def _validate(tmp_path: Path, *extra: str) -> tuple[int, dict]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "report.json"
    code = main(["validate", "--launch-module", "sglang_standin", "--workdir", str(tmp_path / "work"),
                 "--out", str(out), "--startup-timeout", "60", *FAST, *extra, "--", "--model-path", "m"])
    return code, (json.loads(out.read_text()) if out.exists() else {})


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of an exited child counts as gone
        return "Z" not in Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0]
    except OSError:
        return False


def test_identical_servers_pass_with_throughput_status_and_plugin_lines_and_leave_no_process(
        standin_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, rep = _validate(tmp_path, "--expect", "standin-patch")
    assert code == 0, capsys.readouterr()
    assert rep["agreement"]["identical_rate"] == 1.0 and rep["floor"]["identical_rate"] == 1.0
    assert 0 < rep["agreement"]["max_abs_logprob_diff"] < 0.01  # the patched side's 1e-3 is seen, not hidden
    off, on = rep["servers"]
    assert off["patches"] == "off" and on["patches"] == "all"
    assert len(off["load"]) == len(on["load"]) == 2 and off["tokens_per_s"] > 0 and on["tokens_per_s"] > 0
    row = next(p for p in on["status"]["patches"] if p["patch_id"] == "standin-patch")
    assert row["served_by_patch"] > 0 and "active" in row["states"].values()
    assert any("1 patch installed: standin-patch" in x for x in on["plugin_lines"])
    out = capsys.readouterr().out
    assert "PASS" in out and "throughput patched / unpatched" in out
    children = [int(x) for x in standin_env.read_text().split()]
    assert len(children) == 2
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(p) for p in children), "a server's child process outlived validate"


def test_batched_correctness_passes_with_synthetic_long_prompts(standin_env: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 23's validate at batch 128 / context 8192: a decode-attention patch guarded on the batch is reached
    only by batched requests, so the correctness passes (and their floor) can run batched, on long prompts."""
    code, rep = _validate(tmp_path, "--synthetic-prompts", "6:400", "--check-batch", "3")
    assert code == 0, capsys.readouterr()
    assert rep["prompts"] == 6 and rep["options"]["check_batch"] == 3
    assert rep["agreement"]["identical_rate"] == 1.0 and rep["floor"]["identical_rate"] == 1.0
    assert "3 requests in flight" in capsys.readouterr().out
    from astra_sglang.serving.prompts import synthetic_prompts

    prompts = synthetic_prompts("2:8000")
    assert len(prompts) == 2 and prompts[0].prompt != prompts[1].prompt
    tokens = len(str(prompts[0].prompt).split()) * 13 // 10               # ~1.3 tokens a word
    assert 0.8 * 8000 <= tokens <= 8000
    assert main(["validate", "--synthetic-prompts", "lots", "--", "--model-path", "m"]) == 2


def test_synthetic_prompts_are_as_many_texts_as_asked_for() -> None:
    """`--synthetic-prompts 128:1000` sent 6 texts, each about 21 times (the order depended on the seed modulo 6):
    a validate of 128 prompts judged 6 contexts. Each prompt is now a text of its own, within its token budget."""
    from astra_sglang.serving.prompts import synthetic_prompts

    prompts = [str(p.prompt) for p in synthetic_prompts("128:1000")]
    assert len(set(prompts)) == 128
    assert len({p.split(") ", 1)[1] for p in prompts}) == 128  # the sentences differ too, not only the number
    assert all(len(p.split()) * 13 // 10 <= 1000 for p in prompts)


def test_diverging_outputs_fail_and_name_the_first_divergence(standin_env: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STANDIN_DIVERGE", "1")
    code, rep = _validate(tmp_path)
    assert code == 1
    diverged = [r for r in rep["agreement"]["per_prompt"] if r["first_divergence"] is not None]
    assert len(diverged) > 2
    assert rep["floor"]["identical_rate"] == 1.0  # the unpatched server agrees with itself: the patch is to blame
    probes = rep["ties"]["probes"]
    assert [p["index"] for p in probes] == [r["index"] for r in diverged]
    for p in probes:  # the unpatched server's token wins by 2 nats there, the patched one's by 1: no tie
        assert not p["near_tie"] and p["gap_a"] == pytest.approx(2.0) and p["gap_b"] == pytest.approx(1.0)
    assert any("outputs diverge" in f and "gaps 2 / 1 nats" in f for f in rep["failures"])
    assert "FAIL: outputs diverge" in capsys.readouterr().out


def test_near_tie_flips_are_told_apart_from_wrong_tokens_and_strict_counts_them(
        standin_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A one-ulp flip where the top two tokens are 0.0005 nats apart: not a wrong token, and said so."""
    monkeypatch.setenv("STANDIN_DIVERGE", "tie")
    code, rep = _validate(tmp_path / "a")
    a = rep["agreement"]
    assert a["identical_rate"] < 0.9, "the stand-in's near ties should flip most prompts"
    ties = rep["ties"]
    assert ties["margin"] == pytest.approx(2e-3)  # twice the 1e-3 measured on identical tokens
    assert len(ties["probes"]) == a["prompts"] - a["identical_prompts"]
    assert all(p["near_tie"] and abs(p["gap_a"]) <= 1e-3 and abs(p["gap_b"]) <= 1e-3 for p in ties["probes"])
    assert code == 0, rep["failures"]
    out = capsys.readouterr().out
    assert "near-tie flips, listed above" in out and "near tie: a gap of at most 0.002 nats" in out, out
    code, rep = _validate(tmp_path / "b", "--strict-tokens")
    assert code == 1 and any("outputs diverge" in f for f in rep["failures"])
    code, rep = _validate(tmp_path / "c", "--tie-margin", "0.0001")  # tighter than the stand-in's gaps
    assert code == 1 and not any(p["near_tie"] for p in rep["ties"]["probes"])


def test_a_patch_that_fell_back_fails_validation_even_with_identical_tokens(standin_env: Path, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_FALLBACK", "1")
    code, rep = _validate(tmp_path)
    assert code == 1
    assert rep["agreement"]["identical_rate"] == 1.0
    assert any("fell back" in f and "standin-patch" in f for f in rep["failures"])


def test_an_expected_patch_that_no_process_reports_fails(standin_env: Path, tmp_path: Path) -> None:
    code, rep = _validate(tmp_path, "--expect", "no-such-patch")
    assert code == 1
    assert any("no-such-patch" in f for f in rep["failures"])


def test_an_expected_patch_the_selection_does_not_enable_is_refused_before_any_server_starts(
        standin_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """H100, 2026-12-05: ship_check expected a patch with in_all false while the patched server ran 'all'; both
    servers started (3.5 min) before validate said the patch was never reported."""
    repo = Path(__file__).resolve().parents[1]
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES_DIR", str(repo / "patches"))
    code = main(["validate", "--launch-module", "sglang_standin", "--workdir", str(tmp_path / "w"),
                 "--expect", "triton-silu-and-mul-v1", "--", "--model-path", "m"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "--expect triton-silu-and-mul-v1, but --patches all does not enable it (its manifest has in_all false" in err
    assert "--patches triton-silu-and-mul-v1" in err and not (tmp_path / "w").exists()


def test_a_server_that_dies_at_startup_is_one_error_quoting_its_log(standin_env: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STANDIN_CRASH", "1")
    code, _ = _validate(tmp_path)
    err = capsys.readouterr().err
    assert code == 2
    assert "exited with 3 before it was ready" in err and "out of memory (simulated)" in err
    assert "Traceback" not in err


def test_two_running_servers_by_url(standin_env: Path, tmp_path: Path) -> None:
    procs, urls = [], []
    env_on = dict(os.environ, ASTRA_SGLANG_PATCHES="all", ASTRA_SGLANG_STATUS_DIR=str(tmp_path / "st"))
    for env in (dict(os.environ, ASTRA_SGLANG_PATCHES="off"), env_on):
        port = free_port()
        procs.append(subprocess.Popen([sys.executable, "-m", "sglang_standin", "--port", str(port)], env=env,
                                      start_new_session=True))
        urls.append(f"http://127.0.0.1:{port}")
    try:
        import requests

        # A stand-in imports torch and the plugin before it listens: on a loaded 2-core host that has taken
        # over 10 s, so wait on a deadline and say which server never came up instead of failing later.
        for u in urls:
            deadline = time.monotonic() + 90
            while True:
                try:
                    if requests.get(f"{u}/health", timeout=5).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                assert time.monotonic() < deadline, f"stand-in at {u} not healthy after 90 s"
                time.sleep(0.2)
        out = tmp_path / "r.json"
        code = main(["validate", "--url-off", urls[0], "--url-on", urls[1], "--status-dir", str(tmp_path / "st"),
                     "--out", str(out), *FAST, "--expect", "standin-patch"])
        rep = json.loads(out.read_text())
    finally:
        for p in procs:
            os.killpg(p.pid, 9)
            p.wait()
    assert code == 0, rep["failures"]
    assert rep["servers"][1]["status"]["patches"][0]["served_by_patch"] > 0


@pytest.mark.parametrize("argv, says", [
    (["validate", "--url-off", "http://127.0.0.1:9"], "give both --url-off and --url-on"),
    (["validate", "--launch-module", "sglang_standin"], "nothing to launch"),
    (["validate", "--launch-module", "sglang_standin", "--", "--port", "30000"], "leave --port out"),
    (["validate", "--min-identical", "2", "--", "--model-path", "m"], "bad option"),
])
def test_bad_invocations_are_one_line(argv: list[str], says: str, capsys: pytest.CaptureFixture[str],
                                      standin_env: Path) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_a_bad_prompt_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"prompt": 3.5}\n')
    assert main(["validate", "--prompts", str(bad), "--url-off", "http://a", "--url-on", "http://b"]) == 2
    err = capsys.readouterr().err
    assert "prompt 2" in err and "Traceback" not in err


def test_logprobs_are_compared_only_before_the_first_divergence() -> None:
    a = Completion(token_ids=[1, 2, 3, 4], logprobs=[-0.1, -0.2, -0.3, -0.4])
    b = Completion(token_ids=[1, 2, 9, 4], logprobs=[-0.1, -0.25, -5.0, -0.4])
    short = Completion(token_ids=[1, 2], logprobs=[-0.1, -0.2])
    g = compare([a, a], [b, short])
    assert [r.first_divergence for r in g.per_prompt] == [2, 2]
    assert g.per_prompt[0].max_abs_logprob_diff == pytest.approx(0.05)  # not the 4.7 after the divergence
    assert g.identical_prompts == 0 and g.token_agreement == pytest.approx(4 / 8)


def test_a_reason_in_brackets_is_printed_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """rich reads "[sgl_kernel]" as markup and dropped it from a refusal reason in the status table."""
    from astra_sglang.contract.status import PatchCounts, ProcessStatus

    d = tmp_path / "pg-1"
    d.mkdir()
    rec = ProcessStatus(pid=999999, pgid=1, started=0.0, updated=0.0, exited=True, patches=[
        PatchCounts(patch_id="p", op="fused_add_rmsnorm", state="failed",
                    reason="cannot prepare (ImportError: [sgl_kernel] CRITICAL: Could not load any common_ops library!)")])
    (d / "999999.json").write_text(rec.model_dump_json())
    assert main(["patches", "status", "--dir", str(d)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "[sgl_kernel] CRITICAL" in out


def test_a_server_without_generate_leaves_the_divergence_unexplained_not_a_crash(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from astra_sglang.errors import AstraError
    from astra_sglang.serving import ties
    from astra_sglang.serving.prompts import Prompt

    def no_generate(*args: object, **kwargs: object) -> ties.TopK:
        raise AstraError("http://x: /generate answered 404: not found")

    monkeypatch.setattr(ties, "top_k_next", no_generate)
    a = Completion(token_ids=[1, 2, 3], logprobs=[-0.1, -0.2, -0.3])
    b = Completion(token_ids=[1, 5, 3], logprobs=[-0.1, -0.2, -0.3])
    g = compare([a], [b])
    r = ties.probe_divergences(("http://x", "http://y"), [Prompt(prompt=[7, 8])], [a], [b], g, 5, 0.1, 5.0)
    (p,) = r.probes
    assert (p.position, p.token_a, p.token_b, p.near_tie) == (1, 2, 5, False) and "404" in p.note


def test_the_default_tie_margin_follows_the_measured_drift_but_is_capped() -> None:
    """A patch drifting by 0.3 nats on identical tokens must not excuse its flips with a 0.6-nat margin."""
    from astra_sglang.serving.compare import Agreement
    from astra_sglang.serving.ties import MARGIN_CAP, default_margin

    def drift(x: float) -> Agreement:
        a = Completion(token_ids=[1, 2], logprobs=[-0.5, -0.5])
        return compare([a], [Completion(token_ids=[1, 2], logprobs=[-0.5 + x, -0.5])])

    assert default_margin(drift(0.01), 0.5) == pytest.approx(0.02)
    assert default_margin(drift(0.3), 0.5) == MARGIN_CAP == 0.1
    assert default_margin(drift(0.0), 0.5) == 0.0


def test_a_flip_as_small_as_the_unpatched_servers_own_flips_is_a_near_tie() -> None:
    """H200, 2026-12-04, 128 requests in flight: the unpatched server flipped against itself at gaps of 0.125
    nats (one bf16 ulp of the logits) and the patched server's 22 flips were all of that size; the 0.1 cap called
    them wrong tokens. A flip wider than any the floor made is still not excused."""
    from astra_sglang.serving.compare import Agreement
    from astra_sglang.serving.ties import MARGIN_CAP, Probe, TieReport, default_margin

    drift = compare([Completion(token_ids=[1, 2], logprobs=[-0.5, -0.5])],
                    [Completion(token_ids=[1, 2], logprobs=[-0.5 + 0.139, -0.5])])
    assert isinstance(drift, Agreement)
    floor = TieReport(top_k=5, margin=0.1, probes=[
        Probe(index=21, position=9, token_a=569, token_b=66, gap_a=-0.125, gap_b=0.125),
        Probe(index=7, position=4, token_a=512, token_b=553, gap_a=0.0, gap_b=0.0),
        Probe(index=9, position=3, token_a=1, token_b=2, note="one server does not have the other's token")])
    assert default_margin(drift, 0.5) == MARGIN_CAP                     # without the floor: capped at 0.1
    assert default_margin(drift, 0.5, floor) == pytest.approx(0.125)    # SGLang's own flips widen it
    wide = TieReport(top_k=5, margin=0.1, probes=[Probe(index=0, position=0, token_a=1, token_b=2, gap_a=3.0,
                                                        gap_b=-1.0)])
    assert default_margin(drift, 0.5, wide) == 0.5                      # but never past --max-logprob-diff
    assert default_margin(drift, 0.5, TieReport(top_k=5, margin=0.1)) == MARGIN_CAP


def test_a_launch_argument_given_twice_is_read_as_sglang_reads_it_the_last_one():
    """validate's own port/host/memory choices and profile's model folder read the user's launch arguments the
    way SGLang's argparse does: either spelling, aliases, and the last of a repeated flag."""
    from astra_sglang.serving.launch import flag_value, server_args

    args = ["--port", "30000", "--model", "A", "--port=30001", "--model-path", "B"]
    assert flag_value(args, "--port") == "30001"
    assert flag_value(args, "--model-path", "--model") == "B"
    assert flag_value(args, "--host") is None and flag_value(["--port"], "--port") is None
    args = server_args(["--mem-fraction-static", "0.3", "--mem-fraction-static=0.5"], 9, 0.4)
    assert flag_value(args, "--mem-fraction-static") == "0.5" and flag_value(args, "--port") == "9"


def test_a_run_cut_during_the_load_passes_keeps_its_token_verdict(standin_env: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The H200 validate of the decode-attention patch (2026-12-04) was cut by its time limit in the third load
    pass, after its batched correctness passes had run, and left no report: the tokens had been judged and lost."""
    from astra_sglang.serving import ab

    def cut(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt  # what the device's `timeout` (SIGTERM) becomes in astra-sglang

    monkeypatch.setattr(ab, "load_pass", cut)
    code, rep = _validate(tmp_path, "--expect", "standin-patch")
    assert code != 0
    assert rep, "no report was written before the load passes"
    assert rep["load_measured"] is False and rep["servers"][0]["load"] == []
    assert rep["agreement"]["identical_rate"] == 1.0 and rep["failures"] == []
    assert "tokens judged (PASS)" in capsys.readouterr().err


def test_a_throughput_ratio_with_no_patch_serving_is_called_noise_not_a_speedup() -> None:
    """The H100 report of 2026-12-05 (docs/measurements/2026-12-05-d): 1.150x patched over unpatched throughput, pass
    ratios 1.044-1.267, while no patch served one call. validate must not let that read as a speedup."""
    from astra_sglang.serving.ab import ValidateReport, throughput_note

    repo = Path(__file__).resolve().parents[1]
    rep = ValidateReport.model_validate_json(
        (repo / "docs" / "measurements" / "2026-12-05-d" / "validate_all_h100.json").read_text())
    assert rep.throughput_ratio > 1.1 and rep.throughput_ratio_range[0] > 1.0
    assert throughput_note(rep).startswith("no patch served a call in the patched server")
    assert rep.servers[1].status is not None
    rep.servers[1].status["patches"][0]["served_by_patch"] = 3840
    note = throughput_note(rep)
    assert "do not measure speed" in note and "astra-sglang e2e" in note and "noise" not in note


def test_a_running_servers_counts_are_read_once_they_have_settled(tmp_path: Path) -> None:
    """CI, 2026-12-06: a stand-in served every request within one second and validate read its plugin-load record
    ("active but served no call"): the flusher writes within a second of a change, so a live server's counts are
    read only after they stood still."""
    import threading

    from astra_sglang.contract.status import PatchCounts, ProcessStatus
    from astra_sglang.serving.ab import read_status
    from astra_sglang.serving.launch import Server

    folder = tmp_path / "pg-1"
    folder.mkdir()

    def write(served: int) -> None:
        rec = ProcessStatus(pid=os.getpid(), pgid=1, started=0.0, updated=time.time(), exited=False, patches=[
            PatchCounts(patch_id="p", op="merge_state", state="active", served_by_patch=served)])
        (folder / "1.json.tmp").write_text(rec.model_dump_json())
        os.replace(folder / "1.json.tmp", folder / "1.json")

    write(0)  # the plugin-load record
    late = threading.Timer(1.2, write, args=(12,))  # the flusher's write, a second after the last call
    late.start()
    server = Server(name="patched", url="http://127.0.0.1:1", status_root=tmp_path)
    try:
        live = read_status(server)
        assert live is not None and live["patches"][0]["served_by_patch"] == 12
    finally:
        late.join()
    write(5)
    t0 = time.monotonic()
    stopped = read_status(server, settle=False)  # a stopped server's records are final
    assert stopped is not None and stopped["patches"][0]["served_by_patch"] == 5
    assert time.monotonic() - t0 < 1.0
