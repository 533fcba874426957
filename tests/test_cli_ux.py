"""Rough edges a new user hit on a CPU host: piped tables, stale `patches status`, op folders only their owner
could read, and `extract` errors that waited for SGLang's import and registry scan."""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from astra_sglang.cli.main import main
from astra_sglang.contract.status import PatchCounts, ProcessStatus
from astra_sglang.extract import discovery
from astra_sglang.extract.discovery import OpInfo

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def piped(monkeypatch: pytest.MonkeyPatch) -> None:
    """stdout is a pipe (pytest's capture), and nothing in the environment says it is a terminal."""
    for env in ("FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS"):
        monkeypatch.delenv(env, raising=False)


# 1. piped output: one plain line per row, nothing cut

LONG = ("its SGLang imports cannot be vendored: sglang.srt.layers.quantization.fp8_utils imports "
        "sglang.srt.distributed.parallel_state, which needs torch.distributed initialised at import")


def _infos(n: int) -> list[OpInfo]:
    return [OpInfo(op_id=f"attention.op_{i}", backends=["triton"], source_kind="triton",
                   sources=[f"kernels/ops/attention/op_{i}.py"], torch_reference=False, extractable=False,
                   reason=f"Triton source, but {LONG} ({i})") for i in range(n)]


def test_piped_extract_list_prints_one_uncut_line_per_op(piped: None, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(discovery, "list_ops", lambda: _infos(5))
    assert main(["extract", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + 1 + 5, lines  # title, header, one line per op
    for i in range(5):
        (row,) = [ln for ln in lines if f"attention.op_{i} " in ln]
        assert row.endswith(f"no: Triton source, but {LONG} ({i})")  # the whole reason, on the op's own line
    assert not any(ch in "".join(lines) for ch in "│┃━─╇")  # no box drawing in a file


def test_piped_patches_list_keeps_refusal_reasons_whole(piped: None, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from patch_support import copy_as_regular

    from astra_sglang.contract.patch import load_patch_manifest, write_patch_manifest

    pid = "triton-silu-and-mul-v1"
    dest = copy_as_regular(REPO / "patches" / "silu_and_mul" / pid, tmp_path / "patches" / "silu_and_mul" / pid)
    m = load_patch_manifest(dest)
    m.validated_on.sglang_versions = ["0.4.0"]  # a refusal with a reason
    write_patch_manifest(dest, m)
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES_DIR", str(tmp_path / "patches"))
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES", pid)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert main(["patches", "list", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    reasons = [r for r in (row["why_not"], row["validated_why"]) if r]
    assert reasons and max(map(len, reasons)) > 10
    assert main(["patches", "list"]) == 0
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if pid in ln and not ln.startswith("patches in")]
    for reason in reasons:
        assert reason in line, out  # whole, on the patch's own line


def test_a_terminal_still_gets_richs_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("rich")
    from rich.console import Console

    from astra_sglang.cli.output import console

    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # what rich reads to call the output a terminal
    assert isinstance(console(), Console)


def test_plain_lines_printed_without_markup_keep_their_brackets(capsys: pytest.CaptureFixture[str]) -> None:
    """A drafting progress line (printed with markup=False) quoting "[bold]" or "[sgl_kernel]" stays as written."""
    from astra_sglang.cli.output import PlainConsole

    PlainConsole().print("model said: [bold] and [sgl_kernel] x", markup=False)
    PlainConsole().print("[green]drafted[/] merge_state")
    assert capsys.readouterr().out.splitlines() == ["model said: [bold] and [sgl_kernel] x", "drafted merge_state"]


# 2. patches status: stale records are a line each; the suite writes none into the user's folder


def _record(folder: Path, pid: int, *, exited: bool, updated: float, started: float | None = None,
            patch_id: str = "fake-patch") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rec = ProcessStatus(pid=pid, pgid=1, process="python -m sglang.launch_server", started=started or updated,
                        updated=updated, exited=exited,
                        patches=[PatchCounts(patch_id=patch_id, op="merge_state", state="active", served_by_patch=7)])
    (folder / f"{pid}.json").write_text(rec.model_dump_json())


@pytest.fixture
def dead_pid() -> Iterator[int]:
    """A pid no process has now (a child that already exited and was reaped)."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    yield pid


def test_status_with_no_server_running_says_so_and_shows_no_stale_tables(
        piped: None, capsys: pytest.CaptureFixture[str], tmp_path: Path, dead_pid: int) -> None:
    when = time.mktime((2026, 12, 2, 10, 0, 0, 0, 0, -1))
    _record(tmp_path / "pg-1234", 11, exited=True, updated=when - 60)
    _record(tmp_path / "pg-1234", 12, exited=True, updated=when)
    _record(tmp_path / "pg-1234", dead_pid, exited=False, updated=when - 30)  # killed: no exit record
    _record(tmp_path / "pg-77", dead_pid, exited=False, updated=when - 3600, patch_id="older")
    assert main(["patches", "status", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("no server is running")
    assert "pg-1234: 3 processes, none alive, last record 2026-12-02 10:00 - stale; `--all` to show" in lines
    assert any(ln.startswith("pg-77: 1 process, none alive, last record 2026-12-02 09:00") for ln in lines)
    assert len(lines) == 3 and "fake-patch" not in out  # no table of what nobody serves now

    assert main(["patches", "status", "--dir", str(tmp_path), "--all"]) == 0
    out = capsys.readouterr().out
    assert "fake-patch" in out and "older" in out and "active x3" in out


def test_status_shows_live_servers_as_tables_and_stale_ones_as_lines(
        piped: None, capsys: pytest.CaptureFixture[str], tmp_path: Path, dead_pid: int) -> None:
    now = time.time()
    _record(tmp_path / "pg-1", os.getpid(), exited=False, updated=now, patch_id="live-patch")  # this process: alive
    _record(tmp_path / "pg-2", dead_pid, exited=False, updated=now - 10, patch_id="dead-patch")
    assert main(["patches", "status", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "no server is running" not in out
    assert "live-patch" in out and "1 running" in out
    assert "dead-patch" not in out and any(ln.startswith("pg-2: 1 process, none alive") for ln in out.splitlines())

    assert main(["patches", "status", "--dir", str(tmp_path / "pg-2")]) == 0  # one server's folder, by name
    assert "dead-patch" in capsys.readouterr().out


def test_a_record_whose_pid_was_reused_is_not_a_running_process(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path) -> None:
    """This test's pid runs, but it started after the record was written: a later process reusing the pid."""
    if not Path(f"/proc/{os.getpid()}/stat").exists():
        pytest.skip("no /proc here: a reused pid cannot be told apart")
    _record(tmp_path / "pg-5", os.getpid(), exited=False, updated=1_000_000.0, started=1_000_000.0)
    assert main(["patches", "status", "--dir", str(tmp_path), "--json"]) == 0
    (srv,) = json.loads(capsys.readouterr().out)["servers"]
    assert srv["stale"] and not srv["processes"][0]["running"]


def test_the_suite_writes_no_per_user_file_under_home() -> None:
    """Status records of the suite's child processes and fake patches showed up in a user's `patches status`."""
    from astra_sglang.harness.parent.heldout import secret_path
    from astra_sglang.patches.registry import state_path
    from astra_sglang.patches.status_file import status_root

    home = Path.home().resolve()
    for path in (status_root(), state_path(), secret_path()):
        assert not path.resolve().is_relative_to(home), path


# 3. extract writes folders that follow the umask


@pytest.mark.parametrize("mask", [0o022, 0o027], ids=["umask-022", "umask-027"])
def test_extracted_op_folder_follows_the_umask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mask: int) -> None:
    from astra_sglang.contract.op import load_manifest
    from astra_sglang.extract import extractor
    from astra_sglang.extract.catalog.ops.merge_state import ENTRY as MERGE_STATE

    def build(entry: object, root: Path, kept: object) -> object:  # the folder's files, without SGLang
        (root / "src").mkdir()
        (root / "src" / "kernel.py").write_text("# vendored\n")
        return load_manifest(REPO / "extracted" / "merge_state")

    monkeypatch.setattr(extractor, "build_manifest", build)
    old = os.umask(mask)
    try:
        done = extractor.write_op(MERGE_STATE, tmp_path / "out")
        extractor.write_op(MERGE_STATE, tmp_path / "out")  # re-extracting replaces the folder: same modes
    finally:
        os.umask(old)
    folder = done.path
    assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~mask
    assert stat.S_IMODE((folder / "src").stat().st_mode) == 0o777 & ~mask
    assert stat.S_IMODE((folder / "src" / "kernel.py").stat().st_mode) == 0o666 & ~mask
    assert stat.S_IMODE((folder / "manifest.json").stat().st_mode) == 0o666 & ~mask


# 4. extract's errors come before SGLang's import and registry scan


@pytest.fixture
def no_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan (after importing SGLang: ~40 s on a CPU host) must not be reached."""

    def scan() -> list[OpInfo]:
        raise AssertionError("the registry scan ran")

    monkeypatch.setattr(discovery, "list_ops", scan)
    monkeypatch.setattr(discovery, "require_sglang", scan)


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("astra-sglang: error:"), err
    return err[0]


def test_a_typo_is_answered_with_did_you_mean_before_the_scan(no_scan: None, capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
    pytest.importorskip("sglang")
    line = _error(capsys, ["extract", "silu_and_mull", "--out", str(tmp_path)])
    assert "unknown op 'silu_and_mull'; did you mean silu_and_mul" in line
    line = _error(capsys, ["extract", "zzqqxx_nothing_like_it", "--out", str(tmp_path)])
    assert "unknown op 'zzqqxx_nothing_like_it'" in line and "astra-sglang extract --list" in line
    assert list(tmp_path.iterdir()) == []


def test_out_that_is_a_file_is_refused_before_the_scan(no_scan: None, capsys: pytest.CaptureFixture[str],
                                                       tmp_path: Path) -> None:
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    assert "is a file, not a folder" in _error(capsys, ["extract", "merge_state", "--out", str(f)])
    assert "is a file, not a folder" in _error(capsys, ["extract", "merge_state", "--draft", "--out", str(f)])
    assert f.read_text() == "mine"


def test_list_options_without_list_are_refused(no_scan: None, capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    line = _error(capsys, ["extract", "merge_state", "--json", "--out", str(tmp_path)])
    assert "--json" in line and "--list" in line


def test_draft_without_an_api_key_is_refused_before_the_scan(no_scan: None, capsys: pytest.CaptureFixture[str],
                                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("sglang")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    line = _error(capsys, ["extract", "activation.silu_and_mul_clamp", "--draft", "--out", str(tmp_path)])
    assert "no API key" in line and "OPENAI_API_KEY" in line


def test_a_name_sglang_may_know_still_goes_to_the_scan(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The cheap check only refuses names found nowhere; the registry decides the others (here: no entry)."""
    pytest.importorskip("sglang")
    info = OpInfo(op_id="activation.silu_and_mul_clamp", backends=["jit"], source_kind="cuda_jit", sources=["x.cuh"],
                  torch_reference=False, extractable=False, reason=discovery.no_entry_reason(
                      "activation.silu_and_mul_clamp", "CUDA JIT (x.cuh)"))
    monkeypatch.setattr(discovery, "list_ops", lambda: [info])
    from astra_sglang.extract import extractor

    monkeypatch.setattr(extractor, "list_ops", lambda: [info])
    line = _error(capsys, ["extract", "silu_and_mul_clamp", "--out", str(tmp_path)])
    assert "activation.silu_and_mul_clamp cannot be extracted" in line
    assert "`astra-sglang extract activation.silu_and_mul_clamp --draft`" in line
