"""ASTRA_SGLANG_TRACE=1 is how a GPU pass's minutes get attributed: each line must name the case or shape it is
at, and must never print a held-out case's shape (the judge's secret)."""

from astra_sglang.harness.shared.isolation import trace_line
from astra_sglang.harness.shared.protocol import CaseSpec, Progress


def test_a_check_step_names_its_case_and_a_heldout_one_only_its_number():
    case = CaseSpec(dims={"B": 128, "S": 1024}, dtype="bfloat16", distribution="normal", seed=3)
    line = trace_line(Progress(step="check", index=7, case=case))
    assert line == "check #7 {'B': 128, 'S': 1024} bfloat16 normal"
    secret = CaseSpec(dims={"B": 77, "S": 4099}, dtype="float16", distribution="normal", seed=4, heldout=True)
    line = trace_line(Progress(step="check", index=8, heldout=True, case=secret))
    assert line == "check held-out case #8" and "4099" not in line
    assert trace_line(Progress(step="time", dims={"B": 1}, dtype="bfloat16")) == "time {'B': 1} bfloat16"
    assert trace_line(Progress(step="warm-up")) == "warm-up"
