"""``extract OP --draft`` with SCRIPTED drafts from the fake OpenAI-compatible server (real SDK, real HTTP).

The op is SGLang's real ``speculative.row_argmax`` (Triton, no catalog entry); the drafts are the developers'
(tests/draft_support.py), never a model's. On CPU the original runs under TRITON_INTERPRET=1 on the test
shapes. Everything runs in this process through the CLI's ``main`` so SGLang's registry is imported once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import draft_support as ds
import pytest
from fake_openai_server import FakeOpenAIServer, Script, final

from astra_sglang.cli.main import main
from astra_sglang.contract.op import load_manifest, manifest_sha256
from astra_sglang.contract.validation import read_validations, require_validated

KEY = "sk-astra-draft-test-51c0"


@pytest.fixture()
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASTRA_DRAFT_KEY", KEY)


@pytest.fixture(autouse=True)
def _row_argmax_without_a_contract(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scripted drafts target SGLang's row_argmax, which now also has a hand-written catalog entry: hide it,
    so that it plays what drafting is for, a real Triton op of the installed SGLang with no contract yet."""
    from astra_sglang.extract import catalog

    kept = tuple(e for e in catalog.entries() if e.op_id != ds.OP)
    monkeypatch.setattr(catalog, "entries", lambda: kept)


def _argv(tmp: Path, url: str, *more: str, op: str = ds.OP, device: str = "cpu") -> list[str]:
    return ["extract", op, "--draft", "--out", str(tmp / "out"), "--drafts-dir", str(tmp / "drafts"),
            "--model", "o4-mini", "--base-url", url, "--api-key-env", "ASTRA_DRAFT_KEY", "--device", device,
            "--retry-backoff-s", "0.01", "--request-timeout-s", "30", *more]


def _chats(srv: FakeOpenAIServer) -> list[dict]:
    return [r.body for r in srv.requests if r.path.endswith("/chat/completions")]


def _text(body: dict) -> str:
    return json.dumps(body["messages"])


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = [ln for ln in capsys.readouterr().err.strip().splitlines() if ln.startswith("astra-sglang: error:")]
    assert len(lines) == 1, lines
    assert "Traceback" not in lines[0]
    return lines[0]


def _only_log(tmp: Path) -> Path:
    (log,) = (tmp / "drafts").glob("*/*/draft.json")
    return log.parent


def test_scripted_correct_draft_is_validated_and_accepted(key, tmp_path: Path) -> None:
    script = Script().add("contract", final(ds.correct_draft()))
    with FakeOpenAIServer(script, api_key=KEY) as srv:
        assert main(_argv(tmp_path, srv.url)) == 0
        (first,) = _chats(srv)
    prompt = _text(first)
    # the agent saw the kernel, its wrapper and the serving call site, read from the installed SGLang
    assert "_argmax_partial_kernel" in prompt and "def row_argmax" in prompt and "fast_sample" in prompt
    assert "LLaMA-3-8B" in prompt and "bfloat16: atol=0.016" in prompt  # model configs and tolerance rules
    folder = tmp_path / "out" / "row_argmax"
    m = load_manifest(folder)
    assert m.provenance.kind == "drafted" and m.provenance.model == "o4-mini" and m.provenance.attempts == 1
    assert m.op_id == ds.OP and m.recipe.kind == "triton" and (folder / "reference.py").read_text() == ds.REFERENCE
    (v,) = read_validations(folder).validations  # type: ignore[union-attr]
    assert v.passed and v.manifest_sha256 == manifest_sha256(folder) and v.cases_run > 0
    assert v.device_kind == "cpu" and v.shape_set == "test"
    assert require_validated(folder, m.short_name) == v  # optimize would accept it
    status = json.loads((_only_log(tmp_path) / "draft.json").read_text())
    assert status["status"] == "accepted" and status["folder"] == str(folder)


def test_scripted_wrong_reference_is_fed_back_then_the_corrected_draft_accepted(key, tmp_path: Path) -> None:
    script = Script().add("contract", final(ds.with_reference(ds.WRONG_REFERENCE)), final(ds.correct_draft()))
    with FakeOpenAIServer(script, api_key=KEY) as srv:
        assert main(_argv(tmp_path, srv.url)) == 0
        chats = _chats(srv)
    assert len(chats) == 2
    log = _only_log(tmp_path)
    verdict = (log / "attempt-01" / "verdict.txt").read_text().strip()
    assert verdict.startswith("disagrees: reference mismatch at dims=")
    failing_case = verdict.removeprefix("disagrees: ")
    feedback = chats[1]["messages"][-1]["content"]
    assert "The ORIGINAL kernel disagrees" in feedback and failing_case in feedback
    assert "argmin" in _text(chats[1])  # the conversation carries the rejected draft
    assert load_manifest(tmp_path / "out" / "row_argmax").provenance.attempts == 2


def test_scripted_self_contradicting_draft_is_refused_before_any_kernel_runs(key, tmp_path: Path) -> None:
    script = Script().add("contract", final(ds.self_contradicting()), final(ds.correct_draft()))
    with FakeOpenAIServer(script, api_key=KEY) as srv:
        assert main(_argv(tmp_path, srv.url)) == 0
        chats = _chats(srv)
    reason = "call item 'logits_scale' is neither an argument name nor a Python literal"
    assert reason in chats[1]["messages"][-1]["content"] and "no kernel was run" in chats[1]["messages"][-1]["content"]
    log = _only_log(tmp_path)
    assert (log / "attempt-01" / "verdict.txt").read_text().startswith("refused: call list: " + reason)
    assert not list((log / "attempt-01").rglob("validation.json"))  # refused, not validated


def test_scripted_prose_and_invalid_json_get_feedback_then_a_draft(key, tmp_path: Path) -> None:
    script = Script().add("contract", final("Sure! Here is the contract you asked for: row_argmax takes x."),
                          final('{"short_name": "row_argmax", "signature": '), final(ds.correct_draft()))
    with FakeOpenAIServer(script, api_key=KEY) as srv:
        assert main(_argv(tmp_path, srv.url)) == 0
        chats = _chats(srv)
    assert len(chats) == 3
    for body in chats[1:]:
        assert "Your reply is not a draft contract" in body["messages"][-1]["content"]
    assert load_manifest(tmp_path / "out" / "row_argmax").provenance.attempts == 3


def test_scripted_prose_every_time_is_one_line(key, tmp_path: Path, capsys) -> None:
    script = Script().default("contract", lambda body: final("I cannot write JSON today."))
    with FakeOpenAIServer(script, api_key=KEY) as srv:
        assert main(_argv(tmp_path, srv.url, "--draft-attempts", "2")) == 2
    line = _error_line(capsys)
    assert "no draft validated in 2 attempt(s)" in line and "(no_draft)" in line and "Invalid JSON" in line
    assert not (tmp_path / "out").exists()


def test_no_api_key_is_one_line_and_nothing_written(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("ASTRA_DRAFT_KEY", raising=False)
    assert main(_argv(tmp_path, "http://127.0.0.1:9/v1")) == 2
    line = _error_line(capsys)
    assert "no API key: environment variable ASTRA_DRAFT_KEY is not set" in line
    assert not (tmp_path / "out").exists() and not (tmp_path / "drafts").exists()


@pytest.mark.parametrize("op, wanted", [
    ("no_such_kernel_anywhere", "unknown op 'no_such_kernel_anywhere'"),
    ("gemm.fp8_scaled_mm", "is compiled only (the sgl_kernel wheel): the installed SGLang has no source"),
    ("attention.chunk_gated_delta_rule", "has no kernel source to draft a contract from"),
    # its Python closure reaches torch.distributed process-group state (the one kind of SGLang import not vendored)
    ("lora.fused_moe_lora", "cannot be drafted: Triton source, but its SGLang imports cannot be vendored"),
    ("merge_state", "has a hand-written contract: `astra-sglang extract merge_state` writes it"),
])
def test_ops_that_cannot_be_drafted_are_one_line(key, tmp_path: Path, capsys, op: str, wanted: str) -> None:
    script = Script()
    with FakeOpenAIServer(script, api_key=KEY) as srv:
        assert main(_argv(tmp_path, srv.url, op=op)) == 2
        assert _chats(srv) == []  # refused before the model is asked anything
    assert wanted in _error_line(capsys)
    assert not (tmp_path / "out").exists() and not (tmp_path / "drafts").exists()


def test_scripted_draft_that_never_validates_leaves_the_existing_folder(key, tmp_path: Path, capsys) -> None:
    existing = tmp_path / "out" / "row_argmax"
    existing.mkdir(parents=True)
    (existing / "mine.txt").write_text("an earlier folder")
    script = Script().default("contract", lambda body: final(ds.with_reference(ds.WRONG_REFERENCE)))
    with FakeOpenAIServer(script, api_key=KEY) as srv:
        assert main(_argv(tmp_path, srv.url, "--draft-attempts", "2")) == 2
    line = _error_line(capsys)
    assert "no draft validated in 2 attempt(s); last failure (disagrees): reference mismatch at dims=" in line
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["row_argmax"]  # no half-written sibling
    assert [p.name for p in existing.iterdir()] == ["mine.txt"]
    log = _only_log(tmp_path)
    assert str(log) in line
    for attempt in ("attempt-01", "attempt-02"):
        assert json.loads((log / attempt / "draft.json").read_text())["reference"] == ds.WRONG_REFERENCE
    assert len(list((log / "calls").glob("*.json"))) == 2  # the transcript: every model call
    assert json.loads((log / "draft.json").read_text())["status"] == "failed"


def test_scripted_resume_replays_recorded_calls(key, tmp_path: Path, capsys) -> None:
    first = Script().add("contract", final(ds.with_reference(ds.WRONG_REFERENCE)))
    with FakeOpenAIServer(first, api_key=KEY) as srv:
        assert main(_argv(tmp_path, srv.url, "--draft-attempts", "1")) == 2
    _error_line(capsys)
    log = _only_log(tmp_path)
    verdict = (log / "attempt-01" / "verdict.txt").read_text().strip().removeprefix("disagrees: ")
    second = Script().add("contract", final(ds.correct_draft()))
    with FakeOpenAIServer(second, api_key=KEY) as srv:
        assert main(_argv(tmp_path, srv.url, "--draft-attempts", "2", "--resume", str(log))) == 0
        chats = _chats(srv)
    # the first draft came from the record; only the feedback on it went to the server
    assert len(chats) == 1 and verdict in chats[0]["messages"][-1]["content"]
    assert load_manifest(tmp_path / "out" / "row_argmax").provenance.attempts == 2
    assert len(list((log / "calls").glob("*.json"))) == 2


def test_optimize_refuses_an_unvalidated_contract(key, tmp_path: Path, capsys) -> None:
    script = Script().add("contract", final(ds.correct_draft()))
    with FakeOpenAIServer(script, api_key=KEY) as srv:
        assert main(_argv(tmp_path, srv.url)) == 0
    folder = tmp_path / "out" / "row_argmax"
    os.remove(folder / "validation.json")
    capsys.readouterr()
    assert main(["optimize", str(folder), "--runs-dir", str(tmp_path / "runs"), "--model",
                 f"file:{tmp_path / 'inbox'}", "--device", "cpu", "--shapes", "test", "--no-live"]) == 2
    line = _error_line(capsys)
    assert "row_argmax: its contract is not validated" in line and "astra-sglang validate-contract row_argmax" in line
    assert not (tmp_path / "runs").exists()


def _inputs_draft() -> dict:
    d = ds.correct_draft()
    d["signature"]["tensors"][0]["generated"] = True
    d["inputs"] = ("import torch\n\n\ndef make_inputs(dims, dtype, gen, device):\n"
                   "    return {'x': torch.randn(dims['R'], dims['V'] + 1, generator=gen, device=device)}\n")
    return d


@pytest.mark.parametrize("draft, wanted", [
    (ds.changed(shapes=[*ds.correct_draft()["shapes"], {"dims": {"R": 5000, "V": 7}, "tags": ["edge"],
                                                        "source": "too many rows"}]),
     "shape 17 (too many rows): R=5000 is outside its dim's constraints (min 1, max 4096, multiple_of 1)"),
    (ds.changed(shapes=[{"dims": {"R": 2}, "tags": ["edge"], "source": "no vocab"}]),
     "shape 0 (no vocab) gives dims ['R'], the signature declares ['R', 'V']"),
    (ds.with_reference("def reference(x, **_):\n    return {'index': x.argmax(-1)}\n"),
     "the reference does not return ['out'] at dims={'R': 1, 'V': 1} dtype=float32 (it returned ['index'])"),
    (ds.with_reference("def reference(x, **_):\n    return {'out': x.argmax(-1, keepdim=True)}\n"),
     "the reference returns 'out' as (1, 1) at dims={'R': 1, 'V': 1} dtype=float32; the signature says (1,)"),
    (_inputs_draft(), "make_inputs at dims={'R': 1, 'V': 1} dtype=float32: row_argmax: inputs.py gave 'x' as "
                      "(1, 2), the signature says (1, 1) for {'R': 1, 'V': 1}"),
    (ds.changed(tolerances={}), "dtypes ['float32'] have no tolerance"),
])
def test_a_scripted_draft_that_contradicts_itself_gets_the_exact_reason(tmp_path: Path, draft: dict,
                                                                         wanted: str) -> None:
    from astra_sglang.contract.op import ContractProvenance
    from astra_sglang.extract.draft import DraftContract, draft_target, to_entry
    from astra_sglang.extract.extractor import write_op
    from astra_sglang.harness.parent.contract_check import contract_problems

    entry = to_entry(DraftContract.model_validate(draft), draft_target(ds.OP), ContractProvenance(kind="drafted"))
    folder = write_op(entry, tmp_path).path
    problems = contract_problems(folder, load_manifest(folder))
    assert wanted in problems, problems
    assert contract_problems(folder, load_manifest(folder)) == problems  # no state: the same answer twice


def test_the_scripted_correct_draft_has_no_problems(tmp_path: Path) -> None:
    from astra_sglang.contract.op import ContractProvenance
    from astra_sglang.extract.draft import DraftContract, draft_target, to_entry
    from astra_sglang.extract.extractor import write_op
    from astra_sglang.harness.parent.contract_check import contract_problems

    entry = to_entry(DraftContract.model_validate(ds.correct_draft()), draft_target(ds.OP),
                     ContractProvenance(kind="drafted"))
    folder = write_op(entry, tmp_path).path
    assert contract_problems(folder, load_manifest(folder)) == []


@pytest.mark.nvcc
def test_scripted_cuda_draft_on_cpu_is_built_and_left_pending(key, tmp_path: Path, capsys) -> None:
    """No GPU: the original is built with nvcc only; the folder is written without a passing validation, so
    optimize refuses it until validate-contract passes on a GPU host."""
    script = Script().add("contract", final(ds.cuda_draft()))
    with FakeOpenAIServer(script, api_key=KEY) as srv:
        assert main(_argv(tmp_path, srv.url, op=ds.CUDA_OP)) == 0
    err = capsys.readouterr().err
    assert "GPU validation pending" in err and "validate-contract bias_residual_add" in err
    folder = tmp_path / "out" / "bias_residual_add"
    m = load_manifest(folder)
    assert m.provenance.kind == "drafted" and m.recipe.kind == "cuda_jit" and m.inputs is not None
    assert not (folder / "validation.json").exists()
    assert json.loads((_only_log(tmp_path) / "draft.json").read_text())["status"] == "pending_gpu"
    with pytest.raises(Exception, match="validate-contract bias_residual_add"):
        require_validated(folder, m.short_name)


@pytest.mark.gpu
def test_scripted_drafts_validate_on_every_shape_on_the_gpu(key, tmp_path: Path) -> None:
    """On the H200: the Triton draft is validated on all its shapes (timed on the largest), the CUDA one is
    validated too instead of left pending. Drafting reads the installed SGLang, which the device image lacks
    (exit 2 there, 2026-12-06): it runs where SGLang and a GPU are both installed."""
    pytest.importorskip("sglang", reason="extract --draft reads the installed SGLang")
    script = Script().add("contract", final(ds.correct_draft()), final(ds.cuda_draft()))
    with FakeOpenAIServer(script, api_key=KEY) as srv:
        assert main(_argv(tmp_path, srv.url, device="cuda")) == 0
        assert main(_argv(tmp_path, srv.url, op=ds.CUDA_OP, device="cuda")) == 0
    for name in ("row_argmax", "bias_residual_add"):
        folder = tmp_path / "out" / name
        v = require_validated(folder, name)
        assert v.device_kind == "cuda" and v.shape_set == "all" and v.shapes == len(load_manifest(folder).shapes)
        assert v.timed is not None


def test_a_scripted_draft_of_a_kernel_without_a_launch_wrapper_is_accepted_with_its_adapter(key, tmp_path: Path):
    """SGLang launches create_flashinfer_kv_indices_triton directly (kernel[(bs,)](...) in its backends): there is
    no Python wrapper to name. MODEL RUN drafts of it and of get_num_kv_splits_triton (2026-12-04) failed there:
    the kernel named as the wrapper was called without a grid. The draft now carries adapter.py, which launches
    the kernel as the call site does."""
    script = Script().add("contract", final(ds.bare_kernel_draft()))
    with FakeOpenAIServer(script, api_key=KEY) as srv:
        assert main(_argv(tmp_path, srv.url, op=ds.BARE_OP)) == 0
    folder = tmp_path / "out" / "create_flashinfer_kv_indices_triton"
    m = load_manifest(folder)
    assert m.recipe.kind == "triton" and m.recipe.adapter == "adapter.py:call"
    assert (folder / "adapter.py").read_text() == ds.BARE_ADAPTER
    (v,) = read_validations(folder).validations  # type: ignore[union-attr]
    assert v.passed and v.cases_run > 0 and v.manifest_sha256 == manifest_sha256(folder)
    without = ds.bare_kernel_draft()
    del without["adapter"]
    with FakeOpenAIServer(Script().add("contract", final(without)), api_key=KEY) as srv:
        assert main(_argv(tmp_path / "again", srv.url, "--draft-attempts", "1", op=ds.BARE_OP)) != 0
