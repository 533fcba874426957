"""Validating an op's contract: the original kernel against the contract's reference, everywhere it claims.

This is the acceptance test of a contract, drafted or hand-written: the original, built stand-alone from the
op folder, must agree with the reference on every manifest shape x dtype x value distribution (on CPU, for a
Triton op, on the small test shapes under the interpreter). A disagreement is a finding, never a reason to
loosen the tolerance: either the contract is wrong or the kernel is. The same trusted checker process that
judges candidates runs it (``evaluate`` with no candidate), with the same tolerances.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from astra_sglang.contract.eval_config import EvalConfig
from astra_sglang.contract.op import Manifest, load_manifest, manifest_sha256
from astra_sglang.contract.result import EvalResult, FailedCase
from astra_sglang.contract.validation import ContractValidation, FindingCheck, TimedOriginal
from astra_sglang.errors import AstraError
from astra_sglang.harness.parent.evaluate import evaluate, resolve_device, with_gpu
from astra_sglang.harness.shared.suite import check_dtypes, distributions, timed_shapes

# What Triton's CPU interpreter (TRITON_INTERPRET=1, Triton 3.8) cannot run, found by running each op with
# `validate-contract OP --device cpu` and reading its error and values; tests/test_cpu_honesty_validate.py
# re-checks that the interpreter still has each limit (drop an entry once Triton fixes it).
BF16_INTERPRETER = ("is not supported by the Triton CPU interpreter (it keeps bfloat16 as raw 16-bit integers and "
                    "computes on the bits: {how})")
NO_LIBDEVICE = ("the Triton CPU interpreter does not implement triton.language.extra.libdevice (the kernel's "
                "libdevice.tanh returns None: TypeError)")
# op id -> (dtypes the interpreter gets wrong, None = the whole op cannot run there; why)
INTERPRETER_LIMITS: dict[str, tuple[tuple[str, ...] | None, str]] = {
    "attention.decode_attention_fwd": (("bfloat16",), BF16_INTERPRETER.format(how="q*k products and tl.dot")),
    "attention.extend_attention_fwd": (("bfloat16",), BF16_INTERPRETER.format(how="q*k products and tl.dot")),
    "moe.fused_moe_kernel": (("bfloat16",), BF16_INTERPRETER.format(how="tl.dot")),
    "moe.fused_moe_down": (("bfloat16",), BF16_INTERPRETER.format(how="tl.dot")),
    "attention.fused_qk_rope_reshape_and_cache": (
        ("bfloat16",), BF16_INTERPRETER.format(how="the rotation's -x negates the integer")),
    "activation.softcap_inplace_logits": (None, NO_LIBDEVICE),
    "activation.softcap_to_float32_logits": (None, NO_LIBDEVICE),
}


def interpreter_limit(manifest: Manifest, device: str) -> tuple[tuple[str, ...] | None, str] | None:
    """What a run on ``device`` must leave out of this op (dtypes, or None for all of it) and why; None when
    nothing. Only the CPU interpreter has such limits: a GPU run checks everything."""
    return INTERPRETER_LIMITS.get(manifest.op_id) if device == "cpu" else None


def interpretable_dtypes(manifest: Manifest, config: EvalConfig, device: str) -> tuple[list[str], list[str], str]:
    """(kept, left out, why): the dtypes ``config`` checks, split by whether ``device`` computes them right for this
    op (a CPU interpreter limit; a GPU keeps all). A whole-op limit leaves every dtype out."""
    wanted = check_dtypes(manifest, config)
    limit = interpreter_limit(manifest, device)
    if limit is None:
        return wanted, [], ""
    dtypes, why = limit
    left_out = [d for d in wanted if dtypes is None or d in dtypes]
    return [d for d in wanted if d not in left_out], left_out, why


def _without_interpreter_limits(manifest: Manifest, config: EvalConfig,
                                device: str) -> tuple[EvalConfig, dict[str, str]]:
    """``config`` minus the dtypes the interpreter computes wrongly, and why each is left out ({}: none). A
    failure there is the interpreter's, not the kernel's or the contract's: reporting it as a FAIL would be
    as wrong as hiding it, so it is left out by name (the other dtypes must still pass)."""
    limit = interpreter_limit(manifest, device)
    if limit is not None and limit[0] is None:
        raise AstraError(f"{manifest.short_name}: skipped: {limit[1]}; validate it on a GPU host")
    kept, left_out, why = interpretable_dtypes(manifest, config, device)
    if not left_out:
        return config, {}
    if not kept:
        raise AstraError(f"{manifest.short_name}: skipped: {'/'.join(left_out)} {why}; validate it on a GPU host")
    return config.model_copy(update={"dtypes": kept}), {d: why for d in left_out}


def describe_failure(f: FailedCase) -> str:
    """The first failing case in the words an author (or the Contract agent) can act on."""
    where = f"dims={f.dims} dtype={f.dtype} distribution={f.distribution} seed={f.seed}"
    err = f" (max abs err {f.max_abs_err:.3g}, max rel err {f.max_rel_err:.3g})" if f.max_abs_err is not None else ""
    return f"{f.reason} at {where}: {f.detail[:1500]}{err}"


def validation_config(device: str, shapes: str = "auto", timing: bool = True) -> EvalConfig:
    """All shapes on a GPU (the largest timed), the test shapes on CPU; every dtype and distribution the op has."""
    shape_set = ("all" if device == "cuda" else "test") if shapes == "auto" else shapes
    return EvalConfig(shapes=shape_set, device=device,  # type: ignore[arg-type]
                      check_all_shapes=True, include_heldout=False, stateful_checks=0,
                      timing=timing and device == "cuda", max_timed_shapes=1)


def timing_config(config: EvalConfig) -> EvalConfig:
    """Time the original on its largest shape after a validation ran without timing (several validations
    check in parallel on one GPU; timing must not share it): only that shape's normal cases are re-checked."""
    return config.model_copy(update={"timing": True, "check_all_shapes": False, "distributions": ["normal"],
                                     "dtypes": None})


def time_original(op_dir: Path, v: ContractValidation, config: EvalConfig) -> ContractValidation:
    res = evaluate(Path(op_dir), None, timing_config(config))
    return v.model_copy(update={"timed": _timed(res)})


def _timed(res: EvalResult) -> TimedOriginal | None:
    if res.timing is None or not res.timing.shapes:
        return None
    row = res.timing.shapes[0]
    return TimedOriginal(dims=row.dims, dtype=row.dtype, original_us=row.original_us, bytes_moved=row.bytes_moved,
                         pct_copy_ceiling=row.original_pct_ceiling, ceiling_gbps=res.timing.copy_ceiling_gbps)


def validate_contract(op_dir: Path, config: EvalConfig) -> tuple[ContractValidation, EvalResult]:
    """Run the original against the reference and say what happened; the caller decides whether to record it."""
    import torch
    import triton

    op_dir = Path(op_dir)
    manifest = load_manifest(op_dir)
    sha = manifest_sha256(op_dir)
    device = resolve_device(config)
    config, skipped = _without_interpreter_limits(manifest, with_gpu(config, device), device)
    res = evaluate(op_dir, None, config)
    c = res.correctness
    passed = res.error is None and c is not None and c.ok and c.cases_run > 0
    failure = None
    if res.error is not None:
        failure = res.error
    elif c is not None and c.first_failure is not None:
        failure = describe_failure(c.first_failure)
    elif c is not None and c.cases_run == 0:
        failure = f"no case ran: the original refused all {c.skipped_cases} (see the notes: {c.notes[:3]})"
    timed = _timed(res)
    findings = [_recheck(op_dir, config, f.distribution) for f in manifest.findings]
    v = ContractValidation(
        manifest_sha256=sha, device_kind="cuda" if device == "cuda" else "cpu", device=res.device,
        date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), shape_set=config.shapes,
        shapes=len(timed_shapes(manifest, config)) if config.shapes != "all" else len(manifest.shapes),
        dtypes=check_dtypes(manifest, config), distributions=distributions(manifest, config),
        cases_run=c.cases_run if c else 0, cases_skipped=c.skipped_cases if c else 0, skipped=skipped, passed=passed,
        max_error=dict(c.reference_error) if c else {}, first_failure=failure, timed=timed, findings=findings,
        versions={"torch": torch.__version__, "triton": triton.__version__, "sglang": manifest.sglang_version},
    )
    return v, res


def _recheck(op_dir: Path, config: EvalConfig, distribution: str) -> FindingCheck:
    """A declared finding's cases alone: the original must still disagree there, or the finding is stale."""
    res = evaluate(op_dir, None, config.model_copy(update={"findings_only": True, "timing": False,
                                                           "distributions": [distribution]}))
    c = res.correctness
    failed = res.error is None and c is not None and c.first_failure is not None
    ran = (c.cases_run if c else 0) + failed  # the checker stops at the first failing case and counts only passes
    return FindingCheck(distribution=distribution, reproduced=failed, cases_run=ran,
                        first_failure=describe_failure(c.first_failure) if failed and c and c.first_failure
                        else res.error)
