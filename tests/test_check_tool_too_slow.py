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


def test_a_checker_that_went_silent_at_the_last_case_says_how_many_passed_before_it():
    """The K=4 decode-attention round-2 checks said "NO VERDICT; 0 case(s) passed ... at B=512" (2026-12-05): the
    judge itself went silent running SGLang's original at the suite's last, costliest case, the parent killed it
    and wrote the verdict without counting the 55 cases its progress showed passing."""
    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.contract.result import BuildReport
    from astra_sglang.harness.parent.evaluate import _fill
    from astra_sglang.harness.shared.isolation import WorkerOutcome
    from astra_sglang.harness.shared.protocol import CaseSpec, Progress

    def case(b: int) -> CaseSpec:
        return CaseSpec(dims={"B": b, "S": 3}, dtype="bfloat16", distribution="normal", seed=b)

    steps = [Progress(step="load"), *[Progress(step="check", index=i, case=case(i + 1)) for i in range(55)],
             Progress(step="check", index=55, case=case(512))]
    outcome = WorkerOutcome(died="timeout", detail="no progress for 240 s (limit 240 s)", last_progress=steps[-1],
                            progress=steps)
    res = EvalResult(op_id="attention.decode_attention_fwd", device="cpu (TRITON_INTERPRET=1)",
                     sglang_version="0.5.23", build=BuildReport(ok=True))
    _fill(res, outcome, EvalConfig(shapes="test"), "cpu")
    assert res.correctness is not None and res.correctness.cases_run == 55
    text = check_from_result(res, shapes=28).text()
    assert "NO VERDICT; 55 case(s) passed" in text and "'B': 512" in text
