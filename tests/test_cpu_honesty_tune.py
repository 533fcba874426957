"""``tune --device cpu``: interpreter "timings" are host calls of a simulator. The sweep there only checks each
config (a line per config on stderr) and writes nothing; a tune_baseline.json that was not measured on a GPU
is never a bar, and the optimizer's final table never shows a speedup from one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from loop_support import merge_sweep_baseline
from rich.console import Console

from astra_sglang.cli.main import main
from astra_sglang.contract.result import ShapeTiming, SweepBaseline
from astra_sglang.harness.parent.tune_baseline import BASELINE_NAME, read_baseline
from astra_sglang.loop.evaluator import LocalEvaluator
from astra_sglang.loop.records import EvalSpec, RoundRecord, TuneOutcome
from astra_sglang.loop.view import final_table

DIMS = {"T": 512, "NH": 40, "D": 128}


@pytest.fixture()
def op(restored_op, tmp_path: Path) -> Path:
    dest = tmp_path / "merge_state"
    shutil.copytree(restored_op("merge_state"), dest, ignore=shutil.ignore_patterns("build", BASELINE_NAME))
    return dest


def test_tune_on_cpu_checks_every_config_writes_nothing_and_says_so(op, tmp_path, capsys):
    out = tmp_path / "baseline.json"
    rc = main(["tune", str(op), "--device", "cpu", "--seed", "5", "--out", str(out)])
    got = capsys.readouterr()
    assert rc == 0, got.err
    assert not out.exists() and not (op / BASELINE_NAME).exists()
    err = got.err.splitlines()
    assert err[0].startswith("merge_state: correctness-only sweep under the Triton CPU interpreter")
    assert [line.split(":")[0] for line in err[1:]] == [f"config {i}/4 {{'merge_state_kernel.num_warps'" for i in
                                                        range(1, 5)]
    assert all("passed the checks" in line for line in err[1:])
    printed = got.out.splitlines()
    assert printed[0].endswith("checked on the test shapes: 4 correct, 0 dropped")
    assert printed[1].startswith(f"nothing written to {out}: a sweep baseline is a GPU measurement")
    assert " us" not in got.out and "speedup" not in got.out  # no interpreter time is shown as one


def test_tune_on_cpu_refuses_served_shapes_in_one_line(op, capsys):
    assert main(["tune", str(op), "--device", "cpu", "--shapes", "paper"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--device cpu checks the configs on the test shapes only" in err


def _baseline(device: str, speedup: float = 1.066) -> SweepBaseline:
    return merge_sweep_baseline(speedup, device)

def test_a_baseline_not_measured_on_a_gpu_is_ignored_and_never_shown_as_a_speedup(op):
    """What an earlier `tune --device cpu --shapes test` wrote: CPU optimize then printed 'sweep baseline (the
    original retuned): 1.066x' as if measured."""
    (op / BASELINE_NAME).write_text(_baseline("cpu (simulated timing, TRITON_INTERPRET=1)").model_dump_json())
    assert read_baseline(op) is None
    outcome = LocalEvaluator(op).sweep_baseline(EvalSpec(shapes="test", device="cpu"))
    assert outcome.baseline is None and outcome.error and "astra-sglang tune" in outcome.error
    (op / BASELINE_NAME).write_text(_baseline("NVIDIA H200 (sm_90)").model_dump_json())
    assert read_baseline(op) is not None  # a GPU measurement is still the bar

    # a run record that already carries one (written before this fix): the final table shows no speedup
    row = ShapeTiming(dims=DIMS, dtype="bfloat16", original_us=10.0, spread_pct=1.0, bytes_moved=15_728_640,
                      original_gbps=1572.9, original_pct_ceiling=40.0)
    r0 = RoundRecord(round=0, status="ok", correct=True, times=[row], sweep_baseline=TuneOutcome(
        baseline=_baseline("cpu (simulated timing, TRITON_INTERPRET=1)")))
    console = Console(width=200, record=True)
    console.print(final_table([r0], None, "t"))
    text = console.export_text()
    assert "1.066x" not in text and "sweep baseline: none (the sweep ran on cpu" in text
