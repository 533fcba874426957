"""``extract OP --draft``: a Contract agent drafts the op's contract until the original kernel agrees with it.

Each draft is written into an op folder inside the session's log (never into ``--out``), checked against
itself (harness/contract_check.py), then validated: the original against the draft's reference on every shape
on a GPU host, on the test shapes under the Triton interpreter on a CPU host; a CUDA JIT op on a CPU host is
only built with nvcc and its GPU validation is left pending. A refusal or a disagreement goes back to the
agent with the exact reason (the first failing case), at most ``attempts`` drafts. Only an accepted draft
reaches ``--out`` (atomically, through the same extractor as a hand-written entry); a session that never
validates leaves ``--out`` untouched and one line naming the last failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from astra_sglang.agents.config import ModelOptions, RetryPolicy
from astra_sglang.agents.draft_log import DraftLog, Verdict
from astra_sglang.contract.op import ContractProvenance, load_manifest
from astra_sglang.contract.validation import ContractValidation
from astra_sglang.errors import AstraError
from astra_sglang.extract.draft import DraftContract, DraftTarget

Progress = Callable[[str], None]


@dataclass
class DraftRequest:
    op: str
    out: Path
    model: ModelOptions
    retry: RetryPolicy
    attempts: int = 3
    max_turns: int = 12
    drafts_dir: Path = Path("runs/drafts")
    resume: Path | None = None
    device: str = "auto"


@dataclass
class DraftOutcome:
    folder: Path
    status: str  # 'accepted' (validated) or 'pending_gpu' (CUDA JIT built on a CPU host)
    attempts: int
    log: Path
    validation: ContractValidation | None


@dataclass
class _Judged:
    verdict: Verdict
    detail: str
    entry: Any = None  # the CatalogEntry, when the draft became a folder
    validation: ContractValidation | None = None


def _feedback(j: _Judged) -> str:
    if j.verdict == "no_draft":
        return (f"Your reply is not a draft contract: {j.detail}. Answer with ONE JSON object matching the "
                "DraftContract schema and nothing else (no prose, no code fences).")
    if j.verdict == "refused":
        return (f"Your draft contradicts itself, so no kernel was run: {j.detail}. Send the whole corrected "
                "draft as one JSON object.")
    if j.verdict == "build_failed":
        return f"The original kernel does not build with your recipe: {j.detail}. Send the whole corrected draft."
    return (f"The ORIGINAL kernel disagrees with your contract. First failing case: {j.detail}. Either your "
            "contract is wrong (fix the reference, dims or inputs and send the whole corrected draft as one JSON "
            "object) or the kernel is (then say so in notes); never loosen a tolerance to pass.")


class _Session:
    def __init__(self, req: DraftRequest, target: DraftTarget, log: DraftLog, device: str,
                 progress: Progress) -> None:
        self.req = req
        self.target = target
        self.log = log
        self.device = device
        self.progress = progress

    def provenance(self, attempt: int) -> ContractProvenance:
        return ContractProvenance(kind="drafted", model=self.req.model.model, attempts=attempt,
                                  note="drafted by the Contract agent (extract --draft); accepted only after the "
                                       "original kernel agreed with it")

    def judge(self, draft: DraftContract, attempt: int) -> _Judged:
        from astra_sglang.extract.draft import to_entry
        from astra_sglang.extract.extractor import write_op
        from astra_sglang.harness.parent.contract_check import contract_problems

        try:
            entry = to_entry(draft, self.target, self.provenance(attempt))
            folder = write_op(entry, self.log.attempt_dir(attempt)).path
        except AstraError as e:
            return _Judged("refused", str(e))
        except Exception as e:  # the draft's data broke the extractor: still the draft's problem
            return _Judged("refused", f"{type(e).__name__}: {str(e)[:800]}")
        manifest = load_manifest(folder)
        problems = contract_problems(folder, manifest)
        if problems:
            return _Judged("refused", "; ".join(problems), entry)
        if self.target.kind == "cuda_jit" and self.device == "cpu":
            return self._build_only(folder, manifest, entry)
        from astra_sglang.harness import validate_contract, validation_config

        self.progress(f"attempt {attempt}: validating the original kernel against the draft on {self.device}")
        config = validation_config(self.device).model_copy(update={"seed": 0})  # a resumed session sees the same
        v, _ = validate_contract(folder, config)
        if v.passed:
            return _Judged("accepted", f"{v.cases_run} cases on {v.device}", entry, v)
        return _Judged("disagrees", v.first_failure or "validation failed", entry, v)

    def _build_only(self, folder: Path, manifest: Any, entry: Any) -> _Judged:
        from astra_sglang.loader.cuda_build import build_cuda_module

        for dtype in manifest.signature.dtypes:
            try:
                build_cuda_module(folder, manifest, dtype, load=False)
            except AstraError as e:
                return _Judged("build_failed", f"{dtype}: {str(e)[:1500]}", entry)
        return _Judged("pending_gpu", f"built with nvcc for {manifest.signature.dtypes}; GPU validation pending",
                       entry)

    async def run(self, context: str) -> tuple[_Judged, int]:
        from agents import RunConfig, Runner
        from agents.exceptions import MaxTurnsExceeded, ModelBehaviorError

        from astra_sglang.agents.contract_agent import make_contract_agent
        from astra_sglang.agents.draft_log import ReplayModel
        from astra_sglang.agents.models import build_model
        from astra_sglang.agents.recording import ModelAuthFailed, ModelCallFailed, RecordingModel, short_error
        from astra_sglang.agents.run_context import AgentContext

        recorded = self.log.answered_calls() if self.req.resume else []
        recorder = RecordingModel(build_model(self.req.model), self.log, self.req.retry)
        agent = make_contract_agent(recorder)
        config = RunConfig(tracing_disabled=True, workflow_name=f"astra draft {self.target.op_id}")
        conversation: list[Any] = [{"role": "user", "content": context}]
        last = _Judged("no_draft", "no attempt was made")
        try:
            for attempt in range(1, self.req.attempts + 1):
                self.progress(f"attempt {attempt}/{self.req.attempts}: asking {self.req.model.describe()}")
                run = AgentContext(round=attempt, step="draft", agent="contract")  # calls/ records per attempt
                model = ReplayModel(recorder.scoped(run), recorded)
                try:
                    result = await Runner.run(agent, conversation, context=run, max_turns=self.req.max_turns,
                                              run_config=replace(config, model=model))
                except (ModelBehaviorError, MaxTurnsExceeded) as e:
                    last = _Judged("no_draft", short_error(e))
                    self.log.note(attempt, last.verdict, last.detail)
                    conversation = conversation + [{"role": "user", "content": _feedback(last)}]
                    continue
                except ModelAuthFailed as e:
                    raise AstraError(str(e)) from None
                except ModelCallFailed as e:
                    raise AstraError(f"{e}; the session so far is in {self.log.path} (--resume continues)") from None
                finally:
                    recorded = model.unreplayed()
                draft: DraftContract = result.final_output
                self.log.write(f"attempt-{attempt:02d}/draft.json", draft.model_dump_json(indent=2) + "\n")
                last = self.judge(draft, attempt)
                self.log.note(attempt, last.verdict, last.detail)
                self.progress(f"attempt {attempt}: {last.verdict}: {last.detail[:300]}")
                if last.verdict in ("accepted", "pending_gpu"):
                    return last, attempt
                conversation = result.to_input_list() + [{"role": "user", "content": _feedback(last)}]
        finally:
            await recorder.close()
        return last, self.req.attempts


def _accept(req: DraftRequest, target: DraftTarget, judged: _Judged, progress: Progress) -> Path:
    """The accepted draft into ``--out`` (the extractor swaps the folder in atomically) with its record."""
    from astra_sglang.contract.op import manifest_sha256
    from astra_sglang.contract.validation import record_validation
    from astra_sglang.extract.extractor import write_op
    from astra_sglang.harness import validate_contract, validation_config

    folder = write_op(judged.entry, req.out).path
    v = judged.validation
    if v is not None:
        if manifest_sha256(folder) != v.manifest_sha256:  # e.g. traced shapes kept from an earlier folder
            progress("the written manifest differs from the validated one (kept shapes): validating it again")
            v, _ = validate_contract(folder, validation_config(v.device_kind).model_copy(update={"seed": 0}))
        record_validation(folder, target.op_id, v)
        if not v.passed:
            raise AstraError(f"{folder}: the folder with its kept shapes fails validation: {v.first_failure}")
    return folder


def draft_op(req: DraftRequest, progress: Progress = lambda _: None) -> DraftOutcome:
    """Draft, check, validate, and write the op folder; AstraError (one line, exit 2) when no draft validates."""
    from astra_sglang.agents.models import configure_tracing, preflight
    from astra_sglang.extract.draft import draft_target
    from astra_sglang.extract.draft_context import gather_context, render_context
    from astra_sglang.harness import resolve_device, validation_config

    if req.attempts < 1:
        raise AstraError("--draft-attempts must be at least 1")
    target = draft_target(req.op)
    device = resolve_device(validation_config(req.device))
    note = asyncio.run(preflight(req.model))  # a missing key or server: one line before anything is written
    progress(f"model: {req.model.describe()}: {note}")
    configure_tracing(req.model)
    log = DraftLog.open(req.resume, target.op_id) if req.resume else DraftLog.create(
        req.drafts_dir, target.op_id, req.model.model)
    progress(f"draft log: {log.path}")
    context = render_context(gather_context(target))
    log.write("context.md", context)
    try:
        judged, attempts = asyncio.run(_Session(req, target, log, device, progress).run(context))
        if judged.verdict not in ("accepted", "pending_gpu"):
            raise AstraError(f"{target.op_id}: no draft validated in {attempts} attempt(s); last failure "
                             f"({judged.verdict}): {' '.join(judged.detail.split())[:600]}; drafts and transcript "
                             f"in {log.path} (--resume {log.path} continues)")
        folder = _accept(req, target, judged, progress)
    except AstraError as e:
        log.status.status, log.status.message = "failed", str(e)
        log.save()
        raise
    log.status.status, log.status.folder = ("accepted" if judged.verdict == "accepted" else "pending_gpu"), str(folder)
    log.save()
    return DraftOutcome(folder=folder, status=log.status.status, attempts=attempts, log=log.path,
                        validation=judged.validation)
