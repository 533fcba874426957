"""A contract's validation: the original kernel, built stand-alone, against the contract's own reference.

A contract (signature, reference, shapes, tolerances, inputs), hand-written or drafted by a model, is only a
proposal until the original agrees with it on every shape x dtype x distribution. The record lives in
``validation.json`` beside the manifest rather than inside it: validation happens after extraction, often on
another host, and writing it into manifest.json would change the hash every patch pins. Each record pins the
manifest's SHA-256 instead, so a re-extraction that changes the contract invalidates it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from astra_sglang.contract.base import Model, drop_unset, read_versioned, write_atomic
from astra_sglang.contract.op import canonical_op_id, manifest_sha256
from astra_sglang.contract.repin import RePin
from astra_sglang.errors import AstraError

VALIDATION_NAME = "validation.json"
VALIDATION_SCHEMA_VERSION = 1


class ValidationRecordError(AstraError, ValueError):
    """An unreadable validation.json: one line."""


class TimedOriginal(Model):
    """The original's time on one representative shape: where the headroom for an optimizer is."""

    dims: dict[str, int]
    dtype: str
    original_us: float
    bytes_moved: int
    pct_copy_ceiling: float
    ceiling_gbps: float


class FindingCheck(Model):
    """A declared kernel finding run again: ``reproduced`` False means SGLang fixed it (drop the finding)."""

    distribution: str
    reproduced: bool
    cases_run: int
    first_failure: str | None = None


class ContractValidation(Model):
    manifest_sha256: str = Field(description="the manifest.json this validation ran against")
    device_kind: Literal["cuda", "cpu"]
    device: str = Field(description="e.g. 'NVIDIA H200 (sm_90)' or 'cpu (TRITON_INTERPRET=1)'")
    date: str = Field(description="UTC, ISO 8601")
    shape_set: str = Field(description="'all' (every manifest shape) or 'test' (small CPU shapes)")
    shapes: int
    dtypes: list[str]
    distributions: list[str]
    cases_run: int
    cases_skipped: int = Field(description="cases the original refuses (e.g. a dtype it does not build)")
    skipped: dict[str, str] = Field(default_factory=dict, description="dtype -> why this run left it out (e.g. "
                                    "bfloat16 under the Triton CPU interpreter, which computes it wrongly)")
    passed: bool
    max_error: dict[str, tuple[float, float]] = Field(
        default_factory=dict, description="per output: (max |original - reference|, max share of tolerance used)")
    first_failure: str | None = Field(default=None, description="the first failing case, as the agent sees it")
    timed: TimedOriginal | None = None
    findings: list[FindingCheck] = Field(default_factory=list, description="the manifest's kernel findings, re-run")
    versions: dict[str, str] = Field(default_factory=dict, description="torch, triton, sglang")
    repinned: list[RePin] = Field(default_factory=list, description="pins moved since it ran, each proven to change "
                                  "nothing but the op id (contract/repin.py)")

    @model_serializer(mode="wrap")
    def _without_empty_repinned(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return drop_unset(handler(self), "repinned")


class ValidationFile(Model):
    schema_version: int = VALIDATION_SCHEMA_VERSION
    op_id: str
    validations: list[ContractValidation] = Field(default_factory=list)


def read_validations(op_dir: Path) -> ValidationFile | None:
    path = Path(op_dir) / VALIDATION_NAME
    if not path.is_file():
        return None
    return read_versioned(path, ValidationFile, VALIDATION_SCHEMA_VERSION, ValidationRecordError, "validation record")


def record_validation(op_dir: Path, op_id: str, v: ContractValidation) -> Path:
    """Append ``v``; earlier records (other devices, other manifests) are kept: they are the history."""
    current = read_validations(op_dir) or ValidationFile(op_id=op_id)
    if canonical_op_id(current.op_id) == canonical_op_id(op_id):
        current.op_id = op_id  # a file begun before the one op-id form takes the manifest's spelling
    current.validations.append(v)
    path = Path(op_dir) / VALIDATION_NAME
    write_atomic(path, current.model_dump_json(indent=2) + "\n")
    return path


def current_validation(op_dir: Path) -> ContractValidation | None:
    """The best passing validation of the manifest as it is now: a GPU one over all shapes before a CPU one."""
    vf = read_validations(op_dir)
    if vf is None:
        return None
    sha = manifest_sha256(op_dir)
    ok = [v for v in vf.validations if v.passed and v.manifest_sha256 == sha]
    ok.sort(key=lambda v: (v.device_kind == "cuda", v.shape_set == "all", v.date))
    return ok[-1] if ok else None


def require_validated(op_dir: Path, short_name: str) -> ContractValidation:
    """What ``optimize`` checks first: an op whose contract never agreed with its original is not optimized."""
    v = current_validation(op_dir)
    if v is None:
        raise AstraError(f"{short_name}: its contract is not validated against the original kernel for this "
                         f"manifest; run `astra-sglang validate-contract {short_name}` (on a GPU host; a Triton op "
                         "also on CPU: --device cpu --record)")
    return v
