"""A decode_attention patch end to end on CPU (TRITON_INTERPRET=1): `patches add`, the plugin's runtime, the
first-call check, CUDA-graph capture counting, and where SGLang's TritonAttnBackend finds the installed hook.

The candidates are SCRIPTED (tests/fixtures/i23_decode_attention/correct.py, labelled so): a plain correct Triton
kernel, and a copy written here with a deliberate defect. The original is a CPU stand-in with decode_attention_fwd's
signature (the op's float64 reference written into ``o``): SGLang's own decode kernels give garbage under the
Triton interpreter (extracted/decode_attention/validation.json records it); the GPU path is test_acceptance_gpu's.
The op folder is a temporary copy of extracted/decode_attention.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "i23_decode_attention"
TARGET = "sglang.kernels.ops.attention.decode_attention.decode_attention_fwd"
TINY = [{"B": 2, "S": 5, "NK": 1, "G": 2, "D": 16, "P": 1, "R": 2, "X": 3, "MS": 8},
        {"B": 3, "S": 20, "NK": 2, "G": 1, "D": 32, "P": 16, "R": 2, "X": 3, "MS": 8}]


CHILD_ENV = "ASTRA_TEST_I23_FRESH_TRITON"


def ran_in_fresh_interpreter(request: pytest.FixtureRequest) -> bool:
    """Run the calling test again in a child pytest whose Triton is first imported under TRITON_INTERPRET=1.

    Triton decides at import whether its own @jit library functions (tl.zeros, tl.sum, tl.max) are interpreted:
    in a process that imported it without the variable (any earlier test in the same CI worker), an interpreted
    kernel calling them raises "Cannot call @triton.jit'd outside of the scope of a kernel". True when this
    process is the parent and the child passed (the caller returns)."""
    if os.environ.get(CHILD_ENV) == "1":
        return False
    env = {**os.environ, CHILD_ENV: "1", "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"{Path(__file__).relative_to(REPO)}::{request.node.name}"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return True


@pytest.fixture
def env(tmp_path, monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("the CPU path")
    ext = tmp_path / "extracted"
    shutil.copytree(REPO / "extracted" / "decode_attention", ext / "decode_attention",
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("ASTRA_SGLANG_EXTRACTED_DIR", str(ext))
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES_DIR", str(tmp_path / "patches"))
    monkeypatch.setenv("ASTRA_SGLANG_STATE_FILE", str(tmp_path / "state.json"))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    return tmp_path


def add(pid: str, source: str | Path) -> Any:
    """What `patches add` does (screen, import under the interpreter, manifest) for a scripted candidate, then tiny
    check shapes and a guard that holds them. The CLI's --op choices do not list decode_attention yet."""
    from astra_sglang.contract.patch import Provenance, load_patch_manifest, write_patch_manifest
    from astra_sglang.patches.adapters.base import dim_ranges
    from astra_sglang.patches.registry import find
    from astra_sglang.patches.tooling.add import add_patch

    add_patch("decode_attention", FIXTURES / source, patch_id=pid, provenance=Provenance(kind="scripted"),
              sglang_versions=["0.5.23"], archs=["cpu-interpret"])
    e = find(pid)
    m = load_patch_manifest(e.path)
    m.guard.dims = dim_ranges(B=(1, 64, 1), NK=(1, 8, 1), G=(1, 8, 1), D=(16, 256, 16), MS=(8, 8, 1), P=(1, 64, 1))
    m.check_shapes = TINY
    write_patch_manifest(e.path, m)
    return find(pid)


def standin_original() -> Any:
    """CPU stand-in for SGLang's decode_attention_fwd: same signature, the op's reference written into o."""
    from astra_sglang.contract.op import load_manifest
    from astra_sglang.loader.launch import load_reference
    from astra_sglang.patches.registry import op_folder

    folder = op_folder("decode_attention")
    reference = load_reference(folder, load_manifest(folder))
    calls = [0]

    def decode_attention_fwd(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, attn_logits, attn_lse,
                             num_kv_splits, max_kv_splits, sm_scale, k_scale, v_scale, **_: Any) -> None:
        calls[0] += 1
        o.copy_(reference(q=q, k_buffer=k_buffer, v_buffer=v_buffer, o=o, kv_indptr=kv_indptr, kv_indices=kv_indices,
                          attn_logits=attn_logits, attn_lse=attn_lse, num_kv_splits=num_kv_splits,
                          max_kv_splits=max_kv_splits, sm_scale=sm_scale, page_size=_.get("page_size", 1))["o"])

    decode_attention_fwd.calls = calls  # type: ignore[attr-defined]
    return decode_attention_fwd


def forward_decode(hook: Any, seed: int, page_size: int = 1) -> tuple[Any, Any]:
    """One decode batch as TritonAttnBackend.forward_decode passes it (all its keywords); returns (o, args)."""
    from astra_sglang.patches.adapters.decode_attention import DecodeAttentionAdapter

    args, _ = DecodeAttentionAdapter().sample({**TINY[1], "P": page_size}, torch.bfloat16, "cpu", seed)
    hook(*args, logit_cap=0.0, sinks=None, xai_temperature_len=-1, has_mla=False, use_pdl=False,
         page_size=page_size, score_mod=None, aux_tensors=None, enable_lean=True, lean_Mp=None, lean_Lp=None,
         lean_Op=None, lean_locks=None, uneven_batch=None)
    return args[3], args


def test_scripted_patch_passes_its_first_call_check_serves_and_counts_captured_calls(env, request):
    if ran_in_fresh_interpreter(request):
        return
    from astra_sglang.patches import counters, status
    from astra_sglang.patches.runtime import PatchRuntime

    e = add("i23-scripted", "correct.py")
    assert e.manifest.targets == [TARGET]
    original = standin_original()
    status.reset("i23-scripted")
    rt = PatchRuntime(e.path, e.manifest)
    capturing = [True]
    rt._capturing = lambda: capturing[0]
    hook = rt.hook_for(original, TARGET)

    forward_decode(hook, 1)  # a first call inside capture: the original serves, nothing is built or checked
    assert status.statuses()["i23-scripted"].state == "pending"
    capturing[0] = False
    o, args = forward_decode(hook, 2, page_size=16)  # SGLang's eager warm-up before capture: activation
    st = status.statuses()["i23-scripted"]
    assert st.state == "active", st.reason
    assert st.first_call_check.startswith("passed")
    expect = args[3].clone()
    original(*args)
    assert torch.allclose(o.float(), expect.float(), atol=2e-2, rtol=2e-2)
    capturing[0] = True
    forward_decode(hook, 3)  # the captured call is the patch's kernel
    assert counters()["i23-scripted"] == {"patch": 2, "original": 1}
    assert (st.captured_by_patch, st.captured_by_original) == (1, 1)


def test_wrong_scripted_patch_fails_the_check_and_the_original_serves(env, request):
    if ran_in_fresh_interpreter(request):
        return
    from astra_sglang.patches import counters, status
    from astra_sglang.patches.runtime import PatchRuntime

    text = (FIXTURES / "correct.py").read_text()
    assert "\nLOGIT_FACTOR = 1.0\n" in text
    wrong = env / "wrong.py"  # DELIBERATELY WRONG (SCRIPTED): logits scaled by 2
    wrong.write_text(text.replace("\nLOGIT_FACTOR = 1.0\n", "\nLOGIT_FACTOR = 2.0\n"))
    e = add("i23-wrong", wrong)
    original = standin_original()
    status.reset("i23-wrong")
    rt = PatchRuntime(e.path, e.manifest)
    hook = rt.hook_for(original, TARGET)
    o, args = forward_decode(hook, 2)
    st = status.statuses()["i23-wrong"]
    assert st.state == "failed" and "check mismatch" in st.reason
    expect = args[3].clone()
    original(*args)
    assert torch.equal(o, expect)  # this call was the original's
    forward_decode(hook, 3)
    assert counters()["i23-wrong"] == {"patch": 0, "original": 2}


SERVED_FORM_DEFECTS = {
    # q's strides computed as if q were contiguous: wrong where q is a view of LLaMA's qkv rows (QS 1)
    "contiguous_q": ("q.stride(0), q.stride(1),", "q.shape[1] * q.shape[2], q.shape[2],", "'QS': 1"),
    # the last request's end read from kv_indices' length: wrong on a CUDA-graph buffer with stale slots (KX > 0)
    "indices_length": ("    b, nq, d = q.shape\n",
                       "    b, nq, d = q.shape\n    kv_indptr = kv_indptr.clone()\n"
                       "    kv_indptr[b] = kv_indices.numel()\n", "'KX': [1-9]"),
}


@pytest.mark.parametrize("defect", sorted(SERVED_FORM_DEFECTS))
def test_a_patch_wrong_only_in_the_form_a_server_calls_it_fails_its_first_call_check(env, request, defect):
    """SCRIPTED candidates: the correct kernel with one defect that shows only in the form a LLaMA server under
    CUDA graphs calls it (q a view of the qkv rows; kv_indices the whole graph buffer). Right on every check shape
    as written (the eager form), which is all the first-call check ran: each passed it and would have served
    wrong tokens. The check now runs each check shape in the served form too, so the patch fails and the original
    serves."""
    if ran_in_fresh_interpreter(request):
        return
    from astra_sglang.patches import counters, status
    from astra_sglang.patches.runtime import PatchRuntime

    old, new, where = SERVED_FORM_DEFECTS[defect]
    text = (FIXTURES / "correct.py").read_text()
    assert old in text
    wrong = env / f"{defect}.py"  # DELIBERATELY WRONG (SCRIPTED) in the served form only
    wrong.write_text(text.replace(old, new, 1))
    pid = f"i23-{defect.replace('_', '-')}"
    e = add(pid, wrong)
    assert all("QS" not in d and "KX" not in d for d in e.manifest.check_shapes)
    original = standin_original()
    status.reset(pid)
    rt = PatchRuntime(e.path, e.manifest)
    hook = rt.hook_for(original, TARGET)
    forward_decode(hook, 2)
    st = status.statuses()[pid]
    # the failing shape is the served form's (both forms print QS and KX: a bare "'KX': " matched the eager one)
    assert st.state == "failed" and "check mismatch" in st.reason and re.search(where, st.reason), st.reason
    assert counters()[pid] == {"patch": 0, "original": 1}


def test_the_shipped_rewrite_passes_its_first_call_check_in_the_served_form(env, request):
    """The shipped decode-attention rewrite (mr-da2-single-r1, MODEL RUN: Claude answering through the file:
    provider), its kernel file as shipped, through the first-call check on tiny shapes as written and in the form a
    graph-captured LLaMA server calls it (q in the qkv rows, stale graph slots past the rows), float16 (the Triton
    interpreter computes this op's bfloat16 on raw bits). The GPU checks it at its own check shapes."""
    if ran_in_fresh_interpreter(request):
        return
    from astra_sglang.contract.patch import load_patch_manifest, write_patch_manifest
    from astra_sglang.patches import status
    from astra_sglang.patches.registry import find
    from astra_sglang.patches.runtime import PatchRuntime

    e = add("i23-shipped-rewrite", REPO / "patches" / "decode_attention" / "mr-da2-single-r1" / "kernel.py")
    m = load_patch_manifest(e.path)
    m.guard.dtypes = ["float16"]
    write_patch_manifest(e.path, m)
    e = find("i23-shipped-rewrite")
    status.reset("i23-shipped-rewrite")
    rt = PatchRuntime(e.path, e.manifest)
    launched: list[tuple[int, bool]] = []  # per kernel launch: q in the qkv rows, stale graph slots past the rows
    launch = rt.adapter.launch

    def spy(kernel: object, p: Any) -> object:
        launched.append((p.dims["QS"], p.args["kv_indices"].numel() > int(p.args["kv_indptr"][-1])))
        return launch(kernel, p)
    rt.adapter.launch = spy  # type: ignore[method-assign]
    assert rt.activate("cpu", standin_original()), status.statuses()["i23-shipped-rewrite"].reason
    # the check ran the served form, not only had one to run (a guard that skips it would pass here unseen)
    assert sorted(launched) == [(0, False), (0, False), (1, True), (1, True)], launched


CHILD = r'''
import ast, importlib.util, json
from pathlib import Path
from astra_sglang.patches import plugin
from sglang.srt.plugins.hook_registry import HookRegistry

plugin.load()            # what SGLang's load_plugins() runs for this entry point, then:
HookRegistry.apply_hooks()

# TritonAttnBackend.__init__'s own import statement, read from SGLang's source and run as __init__ runs it
src = Path(importlib.util.find_spec("sglang").submodule_search_locations[0]) / "srt/layers/attention/triton_backend.py"
tree = ast.parse(src.read_text())
cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TritonAttnBackend")
init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
imports = [n for n in ast.walk(init) if isinstance(n, ast.ImportFrom)
           and n.module == "sglang.kernels.ops.attention.decode_attention"]
ns = {}
for node in imports:
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(src), "exec"), ns)
fn = ns["decode_attention_fwd"]
cells = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ())]
print("CHILD-RESULT " + json.dumps({
    "imports_in_init": len(imports),
    "hook_id": next((getattr(c, "astra_patch_id", None) for c in cells if getattr(c, "astra_patch_id", None)), None),
}))
'''


def test_plugin_install_reaches_triton_backends_lazy_import(env):
    """A REPLACE of the module attribute at plugin load is what TritonAttnBackend.__init__'s lazy import gets."""
    pytest.importorskip("sglang.srt.plugins")
    add("i23-scripted", "correct.py")
    run_env = dict(os.environ, ASTRA_SGLANG_PATCHES="i23-scripted")
    proc = subprocess.run([sys.executable, "-c", CHILD], env=run_env, capture_output=True,
                          text=True, timeout=300, cwd=REPO)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("CHILD-RESULT ")), None)
    assert line is not None, proc.stderr[-3000:]
    res = json.loads(line.removeprefix("CHILD-RESULT "))
    assert res == {"imports_in_init": 1, "hook_id": "i23-scripted"}, proc.stderr[-3000:]


def test_no_sglang_module_binds_decode_attention_fwd_at_import_time():
    """Why rebinding the module attribute at plugin load covers every call site: the only importer of the name is
    TritonAttnBackend.__init__ (lazily, after plugins load); a module-level ``from ... import`` added by a later
    SGLang would be bound before the hook if imported first (HookRegistry then rebinds it, but say so here)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("SGLang is not installed")
    root = Path(spec.submodule_search_locations[0])
    sites = []
    for path in root.rglob("*.py"):
        text = path.read_text(errors="replace")
        if "decode_attention_fwd" not in text or path.name == "decode_attention.py" and "kernels" in path.parts:
            continue
        for node in ast.walk(ast.parse(text)):
            if (isinstance(node, ast.ImportFrom) and node.module == "sglang.kernels.ops.attention.decode_attention"
                    and any(a.name == "decode_attention_fwd" for a in node.names)):
                sites.append((str(path.relative_to(root)), node.col_offset > 0))
    assert sites == [("srt/layers/attention/triton_backend.py", True)]  # one site, inside a function
