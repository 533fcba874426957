"""What one SGLang process reports about its patches: ``<status dir>/pg-<pgid>/<pid>.json``, one file per process.

SGLang serves from several processes (the launcher, the tokenizer manager, a scheduler per TP rank, the
detokenizer), each loading the plugin on its own, so per-process counters are useless to an operator until
they are gathered: every process writes its record to the folder of its process group (the server's), and
``astra-sglang patches status`` adds them up. A CUDA-graph replay runs the captured kernel without a Python
call, so a call made while a graph was being captured is counted once, as "captured", however often the
graph is replayed afterwards.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from astra_sglang.contract.base import Model, validation_reason

STATUS_SCHEMA_VERSION = 1
# inapplicable: the device is outside what the patch was measured on (no CUDA, another arch, a GPU model it was never
# timed on): SGLang's original serves by design, which is no failed check
PatchState = Literal["pending", "active", "failed", "inapplicable", "disabled"]


class PatchCounts(Model):
    patch_id: str
    op: str = ""
    state: PatchState
    reason: str = Field(default="", description="why it is in this state (a refusal, the check it passed)")
    served_by_patch: int = 0
    served_by_original: int = Field(default=0, description="calls outside the guard, or after a refusal/fallback")
    passed_on: int = Field(default=0, description="calls this patch did not serve, handed to the patch of the same "
                                                  "op stacked behind it (SGLang's kernel retuned), which counts them")
    captured_by_patch: int = Field(default=0, description="of served_by_patch, made during CUDA-graph capture")
    captured_by_original: int = 0
    first_call_check: str = Field(default="", description="'' = not run yet; 'passed ...', 'failed: ...' or "
                                                           "'not applicable: ...'")
    fallbacks: list[str] = Field(default_factory=list,
                                 description="reasons the patch stopped serving after it had been active")


class ProcessStatus(Model):
    schema_version: int = STATUS_SCHEMA_VERSION
    pid: int
    pgid: int
    process: str = Field(default="", description="the process's name or command, to tell SGLang's processes apart")
    started: float = Field(description="time.time() when the plugin loaded")
    updated: float
    exited: bool = False
    selected: str = Field(default="", description="ASTRA_SGLANG_PATCHES as this process saw it")
    patches: list[PatchCounts] = Field(default_factory=list)


def read_process_status(path: Path) -> ProcessStatus:
    """One record; ValueError with one line when it is not a readable record of this schema."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not readable JSON ({type(e).__name__})") from None
    if not isinstance(raw, dict) or raw.get("schema_version") != STATUS_SCHEMA_VERSION:
        raise ValueError(f"{path}: not a status record of schema {STATUS_SCHEMA_VERSION}")
    try:
        return ProcessStatus.model_validate(raw)
    except ValidationError as e:
        raise ValueError(f"{path}: invalid status record: {validation_reason(e)}") from None
