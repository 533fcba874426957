"""A run is judged under one contract. Resumed after a revision of the op contract (decode attention, 2026-12-06:
S 1024 -> 1033 and q in the qkv rows), its new candidates would be timed on the new shapes and ranked against bests
timed on the old ones: `optimize --resume` refuses that with one line, for runs that recorded their contract's digest
and, by the shapes their original was timed on, for runs made before they did."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from loop_support import inject_timing

from astra_sglang.cli.main import main
from astra_sglang.contract.op import load_manifest, manifest_digest, verdict_digest
from astra_sglang.contract.result import BuildReport, EvalResult
from astra_sglang.loop.records import LoopOptions, RunMeta
from astra_sglang.loop.runfolder import RunFolder
from astra_sglang.loop.session import contract_moved

REPO = Path(__file__).resolve().parents[1]


def _run(tmp_path: Path, digest: str | None, dims: dict[str, int]) -> tuple[RunFolder, RunMeta]:
    folder = RunFolder.create(tmp_path / "runs", "merge_state", "r1")
    meta = RunMeta(run_id="r1", op="merge_state", op_id="attention.merge_state_triton",
                   op_dir=str(tmp_path / "merge_state"), model="file:x", rounds=2, mode="multi-agent",
                   created="2026-12-06T00:00:00+00:00", updated="2026-12-06T00:00:00+00:00", options=LoopOptions(),
                   verdict_sha256=digest)
    folder.write_meta(meta)
    r0 = EvalResult(op_id="attention.merge_state_triton", device="NVIDIA H100 80GB HBM3 (sm_90)",
                    sglang_version="0.5.23", build=BuildReport(ok=True))
    timed = inject_timing(r0, 1.0)
    assert timed.timing is not None
    timed.timing.shapes[0].dims = dims
    folder.save_step(0, "result", timed)
    return folder, meta


def _revised(tmp_path: Path) -> Path:
    """merge_state's folder with one timed shape moved, as a contract revision moves them."""
    op = tmp_path / "merge_state"
    shutil.copytree(REPO / "extracted" / "merge_state", op, ignore=shutil.ignore_patterns("src", "build"))
    raw = json.loads((op / "manifest.json").read_text())
    raw["shapes"][0]["dims"]["T"] += 9
    (op / "manifest.json").write_text(json.dumps(raw, indent=2))
    return op


def test_a_run_resumed_under_another_contract_is_refused_by_its_digest(tmp_path: Path) -> None:
    committed = load_manifest(REPO / "extracted" / "merge_state")
    revised = load_manifest(_revised(tmp_path))
    folder, meta = _run(tmp_path, verdict_digest(committed), {"T": 512, "NH": 40, "D": 128})
    assert contract_moved(folder, meta, committed) is None
    said = contract_moved(folder, meta, revised)
    assert said is not None and "another contract of merge_state" in said and "Start a new run" in said


def test_a_run_made_before_digests_is_held_to_the_shapes_its_original_was_timed_on(tmp_path: Path) -> None:
    committed = load_manifest(REPO / "extracted" / "merge_state")
    first = committed.shapes[0].dims
    folder, meta = _run(tmp_path, None, dict(first))
    assert contract_moved(folder, meta, committed) is None
    said = contract_moved(folder, meta, load_manifest(_revised(tmp_path)))
    assert said is not None and "no longer states" in said and str(dict(first)) in said


def test_optimize_resume_says_it_in_one_line_and_exit_2(tmp_path: Path, capsys, restored_op) -> None:
    restored_op("merge_state")
    op = _revised(tmp_path)
    shutil.copytree(REPO / "extracted" / "merge_state" / "src", op / "src")
    committed = load_manifest(REPO / "extracted" / "merge_state")
    _run(tmp_path, verdict_digest(committed), {"T": 512, "NH": 40, "D": 128})
    rc = main(["optimize", "--resume", "r1", "--runs-dir", str(tmp_path / "runs"), "--model", "file:" + str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "another contract of merge_state" in err.splitlines()[-1], err


def test_a_revision_that_only_narrows_a_dims_range_lets_the_run_resume(tmp_path: Path) -> None:
    """2026-12-04: decode attention's G was capped at 16 after a proposed G = 17 showed SGLang's kernel wrong there;
    no shape, file or tolerance moved, so the MODEL RUN it happened in resumed, as it must still."""
    committed = load_manifest(REPO / "extracted" / "merge_state")
    op = tmp_path / "merge_state"
    shutil.copytree(REPO / "extracted" / "merge_state", op, ignore=shutil.ignore_patterns("src", "build"))
    raw = json.loads((op / "manifest.json").read_text())
    raw["signature"]["dims"][0]["max"] = 65536
    (op / "manifest.json").write_text(json.dumps(raw, indent=2))
    narrowed = load_manifest(op)
    assert manifest_digest(narrowed) != manifest_digest(committed)  # the contract did change
    folder, meta = _run(tmp_path, verdict_digest(committed), {"T": 512, "NH": 40, "D": 128})
    assert contract_moved(folder, meta, narrowed) is None
