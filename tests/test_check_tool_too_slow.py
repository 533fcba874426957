"""check_candidate on a CPU host: the Triton interpreter's time limit is not a verdict on the kernel.

On 2026-12-05 five decode-attention checks shared 2 cores; each stopped at its first B=512 case on the no-progress
limit, and the tool told the model "WRONG ... INCORRECT: timeout" about kernels nobody had judged."""

from __future__ import annotations

from astra_sglang.contract.result import BuildReport, CorrectnessReport, EvalResult, FailedCase
from astra_sglang.loop.evaluator import check_from_result


def _timed_out(device: str) -> EvalResult:
    failure = FailedCase(reason="timeout", detail="no progress for 180 s (limit 180 s) during check",
                         dims={"B": 512, "S": 3}, dtype="bfloat16")
    return EvalResult(op_id="attention.decode_attention_fwd", device=device, sglang_version="0.5.23",
                      build=BuildReport(ok=True),
                      correctness=CorrectnessReport(ok=False, cases_run=3, first_failure=failure))


def test_an_interpreter_check_cut_by_its_time_limit_gives_no_verdict_and_says_why():
    report = check_from_result(_timed_out("cpu (TRITON_INTERPRET=1)"), shapes=28)
    text = report.text()
    assert report.correct is None and report.first_failure is None
    assert "NO VERDICT" in text and "3 case(s) passed" in text and "'B': 512" in text
    assert "INCORRECT" not in text and "WRONG" not in text


def test_a_timeout_on_the_gpu_is_still_a_wrong_kernel():
    report = check_from_result(_timed_out("NVIDIA H100 80GB HBM3 (sm_90)"), shapes=28)
    assert report.correct is False and "INCORRECT: timeout" in report.text()
