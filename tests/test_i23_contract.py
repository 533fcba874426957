"""decode_attention's contract at SGLang's serving shapes (issue 23, item 1): the split-KV workspace is never
compared, num_kv_splits is SGLang's own, kv_indices are laid out page by page as SGLang's paged allocator hands
them out, the call passes page_size as forward_decode does, and the bytes per call are the batch's rows."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from astra_sglang.checker import compare_outputs  # noqa: E402
from astra_sglang.contract.op import Tolerance, load_manifest  # noqa: E402
from astra_sglang.extract import catalog  # noqa: E402
from astra_sglang.extract.catalog.base import CatalogEntry  # noqa: E402
from astra_sglang.harness.shared.suite import contract_bytes, shape_of  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXTRACTED = ROOT / "extracted" / "decode_attention"
_FOUND = catalog.find("decode_attention")
assert _FOUND is not None and _FOUND.inputs is not None
ENTRY: CatalogEntry = _FOUND


def _ns(text: str) -> dict[str, Any]:
    ns: dict[str, Any] = {}
    exec(compile(text, "<contract>", "exec"), ns)  # noqa: S102 - our own catalog text, as inputs.py holds it
    return ns


INPUTS = _ns(_FOUND.inputs.text())
REFERENCE = _ns(ENTRY.reference.text())["reference"]


def _dims(**over: int) -> dict[str, int]:
    return {"B": 3, "S": 9, "NK": 2, "G": 2, "D": 16, "P": 4, "R": 2, "X": 1, "KX": 0, "MS": 8, **over}


def _args(dims: dict[str, int], dtype: str = "float16", seed: int = 0) -> dict[str, Any]:
    """Every argument of one call at ``dims``, as the harness passes them (outputs as fresh tensors)."""
    made = INPUTS["make_inputs"](dims, dtype, torch.Generator().manual_seed(seed), "cpu")
    b, nq, d, ms = dims["B"], dims["NK"] * dims["G"], dims["D"], dims["MS"]
    v = torch.randn(made["k_buffer"].shape, generator=torch.Generator().manual_seed(seed + 1)).to(getattr(torch, dtype))
    return {**made, **INPUTS["scalars"](dims, dtype), "v_buffer": v, "o": torch.empty(b, nq, d, dtype=v.dtype),
            "attn_logits": torch.empty(b, nq, ms, d), "attn_lse": torch.empty(b, nq, ms)}


# ------------------------------------------------------------------------------------------- the workspace

def test_a_candidate_is_judged_on_o_alone_never_on_the_split_kv_workspace() -> None:
    """attn_logits / attn_lse are scratch: a candidate that splits the KV otherwise (other partials) or never
    touches them (NaN prefill left) passes when o is right; a wrong o still fails. Before the ':segments' of -1
    the workspace was compared like an output and every other split plan failed."""
    args = _args(_dims())
    ref = REFERENCE(**args)
    tol = load_manifest(EXTRACTED).tolerances["float16"]
    assert isinstance(tol, Tolerance)
    o = ref["o"].to(torch.float16)
    orig = {"o": o, "attn_logits": torch.randn(args["attn_logits"].shape), "attn_lse": torch.randn(args["attn_lse"].shape)}
    other_plan = {"o": o.clone(), "attn_logits": 1e3 * torch.randn(args["attn_logits"].shape),
                  "attn_lse": torch.full(args["attn_lse"].shape, -7.0)}
    untouched = {"o": o.clone(), "attn_logits": torch.full(args["attn_logits"].shape, float("nan")),
                 "attn_lse": torch.full(args["attn_lse"].shape, float("nan"))}
    assert compare_outputs(other_plan, orig, ref, tol) is None
    assert compare_outputs(untouched, orig, ref, tol) is None
    wrong = dict(other_plan, o=o + 0.25)
    m = compare_outputs(wrong, orig, ref, tol)
    assert m is not None and m.detail.startswith("o:")


# ---------------------------------------------------------------------------------- num_kv_splits, SGLang's

_SGLANG_SPLITS = r"""
import json, sys
import torch, triton
from sglang.kernels.ops.attention.metadata import get_num_kv_splits_triton
out = []
for lens, nq, nk, ms, sms in json.loads(sys.stdin.read()):
    seq = torch.tensor(lens, dtype=torch.int32)
    got = torch.empty(len(lens), dtype=torch.int32)
    # TritonAttnBackend.get_num_kv_splits: MAX_NUM_SEQ 256 below 256 requests, else the next power of 2
    sched = 256 if len(lens) < 256 else triton.next_power_of_2(len(lens))
    get_num_kv_splits_triton[(1,)](got, seq, len(lens), 1, nq, nk, ms, sms, MAX_NUM_SEQ=sched)
    out.append(got.tolist())
print(json.dumps(out))
"""


def test_num_kv_splits_is_what_sglangs_triton_kernel_computes() -> None:
    """The inputs' restatement against get_num_kv_splits_triton itself (TRITON_INTERPRET=1), on the serving
    batches: uniform and mixed lengths, batch 1..300 (256 and above: more than the default 256 lanes), GQA 1/4/7/8,
    132 SMs (H200) and the default max_kv_splits 8."""
    gen = torch.Generator().manual_seed(5)
    batches: list[tuple[list[int], int, int]] = [([1024] * 128, 32, 8), ([1024] * 32, 32, 8), ([1024], 32, 8),
                                                 ([8192], 32, 8), ([8192] * 16, 32, 8), ([8192] * 32, 32, 8),
                                                 ([1], 32, 8), ([700] * 16, 8, 8), ([1033] * 64, 28, 4)]
    for b, s, nq, nk in ((128, 1024, 32, 8), (256, 1024, 32, 8), (300, 512, 64, 8), (8, 32768, 32, 4),
                         (64, 2048, 16, 2), (3, 9, 2, 2), (17, 3001, 32, 8)):
        batches.append((INPUTS["kv_lengths"](b, b * s, gen, "cpu").tolist(), nq, nk))
    cases = [(lens, nq, nk, 8, 132) for lens, nq, nk in batches]
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-c", _SGLANG_SPLITS], input=json.dumps(cases), env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    sglang = json.loads(run.stdout.strip().splitlines()[-1])
    for (lens, nq, nk, _, _), want in zip(cases, sglang, strict=True):
        ours = INPUTS["num_kv_splits"](torch.tensor(lens), nq, nk).tolist()
        assert ours == want, (len(lens), nq, nk)
    assert {max(w) for w in sglang} > {1}  # not a trivial agreement: several split counts occur


# --------------------------------------------------------------------------------------- the paged layout

@pytest.mark.parametrize("dims", [
    _dims(), _dims(P=1), _dims(P=16, B=4, S=40), _dims(P=4, R=1, B=2, S=7), _dims(B=5, S=5, NK=5, G=5, P=5, X=5),
    _dims(B=1, S=3, P=32), _dims(B=7, S=1, P=3, R=1), _dims(B=9, S=13, P=8, R=2),
])
def test_kv_indices_fill_whole_pages_per_request_as_sglangs_paged_allocator(dims: dict[str, int]) -> None:
    """Each request's tokens run through whole pages of P consecutive slots (token i at slot page * P + i % P),
    ceil(len / P) pages of its own, the last partly filled; pages never the padding page 0 and inside the pool
    for any legal dims (held-out cases draw P, X, B, S independently)."""
    made = INPUTS["make_inputs"](dims, "float32", torch.Generator().manual_seed(3), "cpu")
    p, pool = dims["P"], made["k_buffer"].shape[0]
    indptr, idx = made["kv_indptr"].long(), made["kv_indices"]
    assert tuple(made["k_buffer"].shape) == shape_of(["B*S+(B+1)*(P-1)+X", "NK", "D"], dims)
    assert idx.dtype == torch.int64 and idx.numel() == dims["B"] * dims["S"] == int(indptr[-1])
    assert len(set(idx.tolist())) == idx.numel() and int(idx.min()) >= p and int(idx.max()) < pool
    lens = (indptr[1:] - indptr[:-1]).tolist()
    if dims["R"] == 1 or dims["B"] == 1:
        assert lens == [dims["S"]] * dims["B"]
    owner: dict[int, int] = {}
    for b, n in enumerate(lens):
        rows = idx[indptr[b]:indptr[b + 1]]
        pos = torch.arange(n)
        assert bool((rows % p == pos % p).all())  # in page order, starting at a page boundary
        pages = rows // p
        assert bool((pages == pages[(pos // p) * p]).all())  # P consecutive tokens share one page
        for page in set(pages.tolist()):
            assert owner.setdefault(page, b) == b  # a page belongs to one request
        assert len(set(pages.tolist())) == math.ceil(n / p)


def test_uniform_and_ragged_kinds() -> None:
    uniform = INPUTS["make_inputs"](_dims(B=6, S=11, R=1), "float32", torch.Generator().manual_seed(0), "cpu")
    ragged = INPUTS["make_inputs"](_dims(B=6, S=11, R=2), "float32", torch.Generator().manual_seed(0), "cpu")
    lens_u = uniform["kv_indptr"].diff()
    lens_r = ragged["kv_indptr"].diff()
    assert lens_u.tolist() == [11] * 6
    assert int(lens_r.sum()) == 66 and lens_r.unique().numel() > 1 and int(lens_r.min()) >= 1


# ------------------------------------------------------------------------------------- the call and shapes

def test_the_call_passes_page_size_as_forward_decode_does_and_the_scalars_keep_their_order() -> None:
    sig = ENTRY.signature
    assert [t.name for t in sig.tensors] == ["q", "k_buffer", "v_buffer", "o", "kv_indptr", "kv_indices",
                                             "attn_logits", "attn_lse", "num_kv_splits"]
    assert [s.name for s in sig.scalars] == ["max_kv_splits", "sm_scale", "page_size"]
    # decode_attention_fwd(..., max_kv_splits, sm_scale, k_scale, v_scale, ..., page_size=self.page_size): the
    # scales by position, page_size by keyword as forward_decode passes it (a candidate needs no other parameter)
    # read from SGLang's source, not imported: importing the module here (Triton kernels defined outside the
    # interpreter) broke an interpreted kernel of a later test in the same process (test_i23_patch_e2e)
    import ast
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.submodule_search_locations
    src = Path(spec.submodule_search_locations[0]) / "kernels" / "ops" / "attention" / "decode_attention.py"
    fn = next(n for n in ast.parse(src.read_text()).body
              if isinstance(n, ast.FunctionDef) and n.name == "decode_attention_fwd")
    params = [a.arg for a in fn.args.args]
    assert ENTRY.call[:11] == params[:9] + ["max_kv_splits", "sm_scale"] and ENTRY.call[11:13] == ["1.0", "1.0"]
    assert ENTRY.call[13:] == ["page_size=page_size"] and "page_size" in params
    from astra_sglang.loader.launch import compile_call

    compiled = compile_call(ENTRY.call, [t.name for t in ENTRY.signature.tensors] + ["max_kv_splits", "sm_scale",
                                                                                    "page_size"])
    assert compiled.keywords == (("page_size", True, "page_size"),)
    assert INPUTS["scalars"](_dims(P=16), "bfloat16")["page_size"] == 16


def test_the_paper_set_is_the_serving_set_the_h200_profile_measured() -> None:
    shapes = ENTRY.shapes()
    paper = [s.dims for s in shapes if "paper" in s.tags]
    assert 12 <= len(paper) <= 16 and all("decode" in s.tags for s in shapes if "paper" in s.tags)
    # the profile's batches at the 9th decode step one_batch profiles: the prefill plus 9 KV rows a request
    profile = {(b, s + 9) for b, s in ((128, 1024), (32, 1024), (1, 1024), (1, 8192), (16, 8192), (32, 8192))}
    exact = {(d["B"], d["S"]) for d in paper
             if (d["NK"], d["G"], d["D"], d["P"], d["R"]) == (8, 4, 128, 1, 1)}
    assert profile <= exact
    # Qwen3-30B-A3B (GQA 8, 4 KV heads), issue 25's MoE model: its decode attention is timed where it serves,
    # or no patch's guard can take its calls (2026-12-07: both decode-attention patches served none of them)
    qwen3 = {d["B"] for d in paper if (d["NK"], d["G"], d["D"], d["P"], d["R"], d["S"]) == (4, 8, 128, 1, 1, 1033)}
    assert qwen3 >= {32, 128}
    assert all(d["QS"] == 1 for d in paper)  # q as LLaMA passes it: a view of the fused qkv rows
    checked = [s.dims for s in shapes if "paper" not in s.tags]
    assert {d["QS"] for d in checked} == {0, 1}  # both layouts stay checked
    assert all(2 * d["B"] * d["S"] * d["NK"] * d["D"] * 2 <= 1.2e9 for d in paper)  # K and V rows, bf16
    assert {d["P"] for d in paper} == {1, 16} and {d["R"] for d in paper} == {1, 2}
    assert {d["G"] for d in paper} == {4, 8} and {d["NK"] for d in paper} == {8, 4, 2}
    assert {d["B"] for d in paper} >= {1, 32, 64, 128, 256}
    tiny = [s.dims for s in shapes if "test" in s.tags]
    assert tiny and all(d["B"] * d["S"] * d["NK"] * d["G"] * d["D"] <= 2048 for d in tiny)
    assert {d["P"] for d in tiny} > {1} and {d["R"] for d in tiny} == {1, 2}


# --------------------------------------------------------------------------------------------------- bytes

def test_bytes_per_call_are_the_batchs_rows_by_hand() -> None:
    """The profile's count (X = 0, page 1) at the profile shape B=128, S=1024, LLaMA-3-8B, bf16: K and V rows of
    the batch (B*S each, not the pool), q and o, kv_indptr / kv_indices / num_kv_splits, the workspace once (an
    output by role: written; its read by stage 2 is not in the rule, see the report of issue 23)."""
    m = load_manifest(EXTRACTED)
    b, s, nk, g, d, ms = 128, 1024, 8, 4, 128, 8
    dims = {"B": b, "S": s, "NK": nk, "G": g, "D": d, "P": 1, "R": 1, "X": 0, "KX": 0, "MS": ms}
    kv = 2 * b * s * nk * d * 2
    q_and_o = 2 * b * nk * g * d * 2
    indices = (b + 1) * 4 + b * s * 8 + b * 4
    workspace = b * nk * g * ms * d * 4 + b * nk * g * ms * 4
    assert contract_bytes(m, dims, "bfloat16") == kv + q_and_o + indices + workspace
    # the harness's shapes keep one padding slot (X = 1) and, paged, the partial pages' slack: counted as read
    assert contract_bytes(m, {**dims, "X": 1}, "bfloat16") == kv + q_and_o + indices + workspace + 2 * nk * d * 2
    # a CUDA-graph call's kv_indices is the whole buffer; only the batch's B*S entries are read
    assert contract_bytes(m, {**dims, "KX": 1 << 21}, "bfloat16") == kv + q_and_o + indices + workspace
    # q read from the qkv rows: its own bytes, not the k and v between them
    assert contract_bytes(m, {**dims, "QS": 1}, "bfloat16") == kv + q_and_o + indices + workspace


def test_no_uniform_timed_batch_lines_its_requests_up_with_a_split_kernels_chunks() -> None:
    """A forward's uniform batch is never a power of two long: one_batch's 9th decode step reads the prefill plus
    9 rows. At B128 S1024 a work-balanced kernel's 132 chunks of 1024 rows were one request each (stage 2 merging
    nothing), at S1033 none is: the bench timed 1.345x where the forward gave 1.231x (H100, 2026-12-06)."""
    paper = [s.dims for s in ENTRY.shapes() if "paper" in s.tags]
    uniform = [d for d in paper if d["R"] == 1 and d["B"] > 1]
    assert uniform
    for d in uniform:
        assert all(d["S"] % block for block in (16, 32, 64, 128)), d  # no BLOCK_N lines up with a request
        rows = d["B"] * d["S"]
        chunk = -(-rows // 132)  # one wave of equal chunks on the H100/H200
        assert chunk % d["S"] and d["S"] % chunk, d


# ------------------------------------------------------------------------------ kv_indices under CUDA graphs

def test_kv_indices_past_the_batch_are_stale_slots_of_the_pool_as_a_graph_replay_passes_them() -> None:
    """Under CUDA graphs TritonAttnBackend passes its whole cuda_graph_kv_indices buffer (max batch x context
    entries); past the batch's rows it holds slots of earlier batches: real pool slots, not this batch's."""
    dims = _dims(KX=50)
    made = INPUTS["make_inputs"](dims, "float32", torch.Generator().manual_seed(5), "cpu")
    idx, pool = made["kv_indices"], made["k_buffer"].shape[0]
    rows = dims["B"] * dims["S"]
    assert idx.numel() == rows + 50 == rows + dims["KX"] and int(made["kv_indptr"][-1]) == rows
    assert int(idx[rows:].min()) >= 0 and int(idx[rows:].max()) < pool
    eager = INPUTS["make_inputs"](_dims(), "float32", torch.Generator().manual_seed(5), "cpu")
    assert torch.equal(eager["kv_indices"], idx[:rows])  # the batch's rows do not depend on the form


def test_the_timed_shapes_are_the_graph_form_and_the_suite_also_checks_eager_calls() -> None:
    """What serving times is a graph replay (every decode batch up to --cuda-graph-max-bs, 256 on an H200): the
    paper shapes carry the H200's LLaMA-3-8B buffer (256 x 8192 entries); eager decode is checked too."""
    shapes = ENTRY.shapes()
    paper = [s.dims for s in shapes if "paper" in s.tags]
    assert all(d["B"] * d["S"] + d["KX"] == 256 * 8192 for d in paper)
    decode = [s.dims for s in shapes if "decode" in s.tags and "paper" not in s.tags]
    assert any(d["KX"] == 0 for d in decode) and any(d["KX"] > 0 for d in decode)
    tiny = [s.dims for s in shapes if "test" in s.tags]
    assert any(d["KX"] == 0 for d in tiny) and any(d["KX"] > 0 for d in tiny)


def test_a_kernel_that_takes_numel_of_kv_indices_for_the_batchs_rows_fails_the_contract(tmp_path) -> None:
    """The MODEL RUN's best round-1 candidates sized their work by kv_indices.numel(), which the old contract
    (kv_indices exactly B*S) could not tell from the batch's rows. This SCRIPTED candidate goes further and reads
    to the end of kv_indices for the last request: right on an exact-length kv_indices, wrong on a graph replay's."""
    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.harness import evaluate

    src = (ROOT / "tests" / "fixtures" / "i23_decode_attention" / "correct.py").read_text()
    head = "    b, nq, d = q.shape\n"
    assert head in src
    cand = tmp_path / "numel_rows.py"
    cand.write_text(src.replace(head, head + "    kv_indptr = kv_indptr.clone()\n"
                                "    kv_indptr[-1] = kv_indices.numel()\n", 1))
    cfg = EvalConfig(shapes="test", dtypes=["float16"], device="cpu", timing=False, seed=3,
                     distributions=["normal"], check_all_shapes=False)
    r = evaluate(EXTRACTED, cand, cfg)
    assert not r.ok and r.correctness is not None and r.correctness.first_failure is not None
    assert r.correctness.first_failure.dims.get("KX", 0) > 0, r.correctness.first_failure
    ok = evaluate(EXTRACTED, ROOT / "tests" / "fixtures" / "i23_decode_attention" / "correct.py", cfg)
    assert ok.ok, ok.error


def test_a_queued_case_written_before_kx_existed_is_run_as_the_eager_form_it_meant() -> None:
    """Requests queued by runs begun before dim KX (2026-12-04: mr-da-k4 / mr-da-single round 1) carry their
    proposed cases without it: the pass completes them with KX = 0 instead of refusing the whole request."""
    from astra_sglang.contract.eval_config import EvalConfig, ExtraCase
    from astra_sglang.harness.shared.suite import build_suite

    m = load_manifest(EXTRACTED)
    old = {"B": 2, "S": 5, "NK": 1, "G": 2, "D": 16, "P": 1, "R": 1, "X": 1, "MS": 8}
    cfg = EvalConfig(shapes="test", dtypes=["float16"], distributions=["normal"],
                     extra_cases=[ExtraCase(dims=old, dtype="float16")])
    extra = [c for c in build_suite(m, cfg, 1, None) if "extra" in c.tags]
    assert [c.dims for c in extra] == [{**old, "KX": 0, "QS": 0}]  # the forms it meant: eager, q contiguous
