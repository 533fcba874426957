"""The plugin as SGLang runs it: SGLang's real ``load_plugins()`` in a fresh process, entry point and all.

No GPU here, so each child process forces SGLang's CUDA code path on CPU: ``sgl_kernel`` is a stub module,
torchvision a stand-in, ``is_cuda()`` answers True while ``sglang.srt.layers.activation`` is imported, and the
JIT ``silu_and_mul`` (which would compile CUDA) is replaced by a CPU function with the same signature and
semantics *before* anything binds it, so it plays SGLang's original. Triton runs under TRITON_INTERPRET=1,
and the shipped patch lists 'cpu-interpret' among the archs it was validated on.

The entry point comes from a throw-away ``*.dist-info`` on PYTHONPATH, so these tests do not depend on
``pip install -e .`` having registered it (if it has, SGLang sees the same plugin name twice and runs it once).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from patch_support import copy_as_regular

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "patches" / "silu_and_mul" / "triton-silu-and-mul-v1"
PID = "triton-silu-and-mul-v1"

pytest.importorskip("sglang.srt.plugins")

CHILD_PRELUDE = r'''
import json, logging, os, sys, types

records = []
class _Collect(logging.Handler):
    def emit(self, record):
        if record.levelno >= logging.WARNING:
            records.append(record.getMessage())
logging.getLogger("astra_sglang").addHandler(_Collect())

from astra_sglang.extract.sglang_env import install_cpu_shims
install_cpu_shims()

class _SglKernelStub(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        def stub(*a, **k):
            raise RuntimeError("sgl_kernel stub called: " + name)
        stub.__name__ = name
        setattr(self, name, stub)
        return stub
_sk = _SglKernelStub("sgl_kernel"); _sk.__path__ = []; _sk.__version__ = "0.0.0"
sys.modules["sgl_kernel"] = _sk

import torch
import torch.nn.functional as F
import sglang.kernels.ops.activation.activation as kact

ORIGINAL_CALLS = [0]
def _make_standin():
    def silu_and_mul(input, out=None, expert_ids=None, expert_step=1, *, sorted_token_ids=None,
                     num_tokens_post_padded=None, num_valid_tokens=0):
        """CPU stand-in for SGLang's JIT silu_and_mul (same signature and semantics)."""
        ORIGINAL_CALLS[0] += 1
        d = input.shape[-1] // 2
        if out is None:
            out = input.new_empty(*input.shape[:-1], d)
        out.copy_(F.silu(input[..., :d].float()) * input[..., d:].float())
        return out
    return silu_and_mul
# Not a module global: HookRegistry rebinds every module attribute that *is* the original.
_BOX = (_make_standin(),)
def standin():
    return _BOX[0]
kact.silu_and_mul = standin()

def import_layers_with_cuda_path():
    import importlib
    for m in ["sglang.kernels.fused_op", "sglang.srt.distributed", "sglang.srt.environ",
              "sglang.srt.layers.quantization.base_config", "sglang.srt.model_executor.cuda_graph_config",
              "sglang.srt.runtime_context"]:
        importlib.import_module(m)
    import sglang.srt.utils as su, sglang.srt.utils.common as suc
    saved = su.is_cuda, suc.is_cuda
    su.is_cuda = suc.is_cuda = lambda: True
    try:
        act = importlib.import_module("sglang.srt.layers.activation")
    finally:
        su.is_cuda, suc.is_cuda = saved
    assert act._is_cuda
    act._jit_act_max_vec_bytes = 16  # what torch.cuda.get_device_capability() would set on sm_90
    return act

import astra_sglang.patches as patches
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry

def native(x):
    d = x.shape[-1] // 2
    return (F.silu(x[..., :d].float()) * x[..., d:].float()).to(x.dtype)

def is_hook(fn):
    """HookRegistry's REPLACE wrapper (functools.wraps of the original) closes over our stand-in."""
    cells = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ())]
    return fn is not standin() and any(getattr(c, "astra_patch_id", None) for c in cells)

def emit(**kw):
    print("CHILD-RESULT " + json.dumps(kw))
'''

HAPPY = r'''
act = import_layers_with_cuda_path()      # layers first: REPLACE must rebind the from-import copy
load_plugins()
res = {}
res["target_is_hook"] = is_hook(kact.silu_and_mul)
res["layers_copy_is_hook"] = is_hook(act._jit_silu_and_mul)
op = act.SiluAndMul()
x = torch.randn(4, 2 * 256).to(torch.bfloat16)
y = op.forward_cuda(x)
res["after_covered"] = patches.counters()[PID]
res["covered_ok"] = bool(torch.allclose(y.float(), native(x).float(), atol=2e-2, rtol=2e-2))
res["state"] = patches.statuses()[PID].state
# outside the guard: dtype, rows, contiguity -> SGLang's original (the stand-in), counted as such
calls0 = ORIGINAL_CALLS[0]
y32 = op.forward_cuda(torch.randn(3, 64))
big = torch.randn(70000, 16).to(torch.bfloat16)                  # T = 70000 > guard max 65536
op.forward_cuda(big)
wide = torch.randn(5, 2 * 64 + 8).to(torch.bfloat16)[:, :128]     # not contiguous
op.forward_cuda(wide)
res["after_outside"] = patches.counters()[PID]
res["original_calls_outside"] = ORIGINAL_CALLS[0] - calls0
# covered again: the patch serves, the original is not called
calls0 = ORIGINAL_CALLS[0]
y = op.forward_cuda(torch.randn(2, 3, 2 * 64).to(torch.float16))
res["after_covered_3d"] = patches.counters()[PID]
res["original_calls_covered"] = ORIGINAL_CALLS[0] - calls0
res["warnings"] = records
emit(**res)
'''

PLUGIN_FIRST_EXCEPTION = r'''
load_plugins()                            # plugins first, then SGLang's layers import the patched function
act = import_layers_with_cuda_path()
res = {"layers_copy_is_hook": is_hook(act._jit_silu_and_mul)}
op = act.SiluAndMul()
op.forward_cuda(torch.randn(4, 256).to(torch.bfloat16))
res["before"] = patches.counters()[PID]
x = torch.randn(5, 256).to(torch.bfloat16)                       # the broken kernel raises on 5 rows
y = op.forward_cuda(x)
res["exception_call_correct"] = bool(torch.allclose(y.float(), native(x).float(), atol=2e-2, rtol=2e-2))
res["after_exception"] = patches.counters()[PID]
op.forward_cuda(torch.randn(4, 256).to(torch.bfloat16))
res["after_disabled"] = patches.counters()[PID]
res["state"] = patches.statuses()[PID].state
res["warnings"] = records
emit(**res)
'''

FAIL_CLOSED = r'''
import sglang.srt.plugins as sp
cases = json.loads(os.environ["CASES"])
out = {}
for case in cases:
    records.clear()
    sp._plugins_loaded = False
    HookRegistry.reset()
    kact.silu_and_mul = standin()
    os.environ["ASTRA_SGLANG_PATCHES"] = case
    load_plugins()
    installed = is_hook(kact.silu_and_mul)
    x = torch.randn(4, 256).to(torch.bfloat16)
    calls0 = ORIGINAL_CALLS[0]
    y = kact.silu_and_mul(x, torch.empty(4, 128, dtype=torch.bfloat16))
    out[case] = {
        "installed": installed,
        "original_calls": ORIGINAL_CALLS[0] - calls0,
        "correct": bool(torch.allclose(y.float(), native(x).float(), atol=2e-2, rtol=2e-2)),
        "counters": patches.counters().get(case),
        "state": getattr(patches.statuses().get(case), "state", None),
        "warnings": list(records),
    }
emit(cases=out)
'''

OFF = r'''
import sglang.srt.plugins as sp
out = {}
for name, env in [("unset", {}), ("filtered_out", {"ASTRA_SGLANG_PATCHES": "all", "SGLANG_PLUGINS": "someone_else"}),
                  ("filtered_in", {"ASTRA_SGLANG_PATCHES": "all", "SGLANG_PLUGINS": "astra_sglang"})]:
    for k in ("ASTRA_SGLANG_PATCHES", "SGLANG_PLUGINS"):
        os.environ.pop(k, None)
    os.environ.update(env)
    sp._plugins_loaded = False
    HookRegistry.reset()
    kact.silu_and_mul = standin()
    load_plugins()
    out[name] = {"target_is_standin": kact.silu_and_mul is standin(), "hooks": sorted(HookRegistry._hooks),
                 "warnings": list(records)}
emit(**out)
'''


def _dist_info(tmp: Path) -> Path:
    site = tmp / "site"
    d = site / "astra_sglang_ci_plugin-0.0.0.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text("Metadata-Version: 2.1\nName: astra-sglang-ci-plugin\nVersion: 0.0.0\n")
    (d / "entry_points.txt").write_text("[sglang.srt.plugins]\nastra_sglang = astra_sglang.patches.plugin:load\n")
    return site


def _run_child(tmp: Path, body: str, env_extra: dict[str, str], root: Path) -> dict:
    script = tmp / "child.py"
    script.write_text(CHILD_PRELUDE + f"\nPID = {PID!r}\n" + textwrap.dedent(body))
    env = {k: v for k, v in os.environ.items() if k not in ("ASTRA_SGLANG_PATCHES", "SGLANG_PLUGINS")}
    env.update({
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": os.pathsep.join([str(_dist_info(tmp)), str(REPO)]),
        "ASTRA_SGLANG_PATCHES_DIR": str(root),
        "ASTRA_SGLANG_STATE_FILE": str(tmp / "state.json"),
        "TRITON_CACHE_DIR": str(tmp / "triton-cache"),
    })
    env.update(env_extra)
    proc = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp, capture_output=True, text=True,
                          timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("CHILD-RESULT ")]
    assert proc.returncode == 0 and lines, (
        f"child failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return json.loads(lines[-1][len("CHILD-RESULT "):])


def _patch_root(tmp: Path) -> Path:
    root = tmp / "patches"
    copy_as_regular(SHIPPED, root / "silu_and_mul" / PID)
    return root


def _variant(root: Path, new_id: str, *, kernel_edit=None, manifest_edit=None, repin: bool = True) -> None:
    """A copy of the shipped patch under another id, broken in one way."""
    from astra_sglang.contract.patch import (
        load_patch_manifest,
        pin_files,
        write_patch_manifest,
    )

    d = root / "silu_and_mul" / new_id
    copy_as_regular(SHIPPED, d)
    m = load_patch_manifest(d)
    m.patch_id = new_id
    if kernel_edit:
        kernel_edit(d / "kernel.py")
    if manifest_edit:
        manifest_edit(m)
    if repin:
        m.files = pin_files(d)
    write_patch_manifest(d, m)


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_patched_function_is_what_forward_cuda_reaches_and_guard_routes_the_rest(tmp_path):
    res = _run_child(tmp_path, HAPPY, {"ASTRA_SGLANG_PATCHES": "all"}, _patch_root(tmp_path))
    assert res["target_is_hook"] and res["layers_copy_is_hook"]
    assert res["after_covered"] == {"patch": 1, "original": 0}
    assert res["covered_ok"] and res["state"] == "active"
    assert res["after_outside"] == {"patch": 1, "original": 3}   # fp32, too many rows, non-contiguous
    assert res["original_calls_outside"] == 3
    assert res["after_covered_3d"] == {"patch": 2, "original": 3}
    assert res["original_calls_covered"] == 0
    assert res["warnings"] == []


def test_exception_at_call_time_falls_back_and_disables_with_one_warning(tmp_path):
    root = _patch_root(tmp_path)
    shutil.rmtree(root / "silu_and_mul" / PID)
    _variant(root, PID, kernel_edit=lambda p: _replace(
        p, "    rows, hidden = out.shape\n",
        "    rows, hidden = out.shape\n    if rows == 5:\n        raise RuntimeError('boom on 5 rows')\n"))
    res = _run_child(tmp_path, PLUGIN_FIRST_EXCEPTION, {"ASTRA_SGLANG_PATCHES": PID}, root)
    assert res["layers_copy_is_hook"]
    assert res["before"] == {"patch": 1, "original": 0}
    assert res["exception_call_correct"]
    assert res["after_exception"] == {"patch": 1, "original": 1}
    assert res["after_disabled"] == {"patch": 1, "original": 2}
    assert res["state"] == "failed"
    assert len(res["warnings"]) == 1 and PID in res["warnings"][0] and "boom on 5 rows" in res["warnings"][0]


def test_every_fail_closed_case_keeps_the_original_with_one_warning(tmp_path):
    root = _patch_root(tmp_path)
    shutil.rmtree(root / "silu_and_mul" / PID)
    _variant(root, "hash", kernel_edit=lambda p: p.write_text(p.read_text() + "\n# altered\n"), repin=False)
    _variant(root, "missing", kernel_edit=lambda p: p.unlink(), repin=False)
    _variant(root, "version", manifest_edit=lambda m: setattr(m.validated_on, "sglang_versions", ["0.4.0"]))
    _variant(root, "arch", manifest_edit=lambda m: setattr(m.validated_on, "archs", ["sm_90"]))
    _variant(root, "build", kernel_edit=lambda p: p.write_text(p.read_text() + "\ndef broken(:\n"))
    _variant(root, "mismatch", kernel_edit=lambda p: _replace(p, "* up\n", "* up + 0.5\n"))
    expect = {
        "hash": ("hash mismatch", False),
        "missing": ("missing file kernel.py", False),
        "version": ("patch validated on 0.4.0", False),
        "arch": ("GPU arch cpu-interpret, patch validated on sm_90", True),
        "build": ("build failed", True),
        "mismatch": ("check mismatch", True),
        "no-such-patch": ("no such patch", False),
    }
    res = _run_child(tmp_path, FAIL_CLOSED, {"CASES": json.dumps(list(expect))}, root)["cases"]
    for case, (reason, installed) in expect.items():
        r = res[case]
        assert len(r["warnings"]) == 1, (case, r)
        assert case in r["warnings"][0] and reason in r["warnings"][0], (case, r["warnings"])
        assert r["installed"] is installed, (case, r)   # activation-time failures: hook present, original serves
        assert r["original_calls"] >= 1 and r["correct"], (case, r)  # (the load-time check calls it too)
        # another arch is the guard at work (the original serves by design), not a failed check
        assert r["state"] == ("inapplicable" if case == "arch" else "failed"), (case, r)
        if installed:
            assert r["counters"] == {"patch": 0, "original": 1}, (case, r)


def test_nothing_is_patched_unless_asked_and_sglang_plugins_filter_is_respected(tmp_path):
    res = _run_child(tmp_path, OFF, {}, _patch_root(tmp_path))
    assert res["unset"] == {"target_is_standin": True, "hooks": [], "warnings": []}
    assert res["filtered_out"] == {"target_is_standin": True, "hooks": [], "warnings": []}
    assert res["filtered_in"]["target_is_standin"] is False          # positive control: same setup, allowed
    assert res["filtered_in"]["hooks"] == ["sglang.kernels.ops.activation.activation.silu_and_mul"]


SERVING_ONLY = r"""
import builtins, json, os, sys, types
import torch.nn.functional as F

# Who imports what: every `import` statement runs builtins.__import__, cached module or not, so an astra_sglang
# module that imports multiprocessing is seen even though torch has imported it already.
from_astra = []
_real_import = builtins.__import__
def _recording_import(name, globals=None, locals=None, fromlist=(), level=0):
    importer = (globals or {}).get("__name__", "")
    if importer.startswith("astra_sglang") and level == 0:
        from_astra.append((importer, name))
    return _real_import(name, globals, locals, fromlist, level)
builtins.__import__ = _recording_import

class _Stub(types.ModuleType):                      # sgl_kernel is CUDA-only: its patch fails closed here
    def __getattr__(self, name):
        raise AttributeError(name)
sys.modules["sgl_kernel"] = _Stub("sgl_kernel")

import sglang.kernels.ops.activation.activation as kact
def silu_and_mul(input, out=None, expert_ids=None, expert_step=1, *, sorted_token_ids=None,
                 num_tokens_post_padded=None, num_valid_tokens=0):
    d = input.shape[-1] // 2
    out = input.new_empty(*input.shape[:-1], d) if out is None else out
    return out.copy_(F.silu(input[..., :d].float()) * input[..., d:].float())
kact.silu_and_mul = silu_and_mul                  # SGLang's JIT function would compile CUDA

from sglang.srt.plugins import load_plugins
load_plugins()
import astra_sglang.patches as patches
import torch
x = torch.randn(4, 256).to(torch.bfloat16)
kact.silu_and_mul(x)                              # the first covered call: build, the checker, then served
print("CHILD-RESULT " + json.dumps({
    "astra": sorted(m for m in sys.modules if m.startswith("astra_sglang")),
    "from_astra": sorted({f"{a} -> {b}" for a, b in from_astra}),
    "states": {k: [v.state, v.reason] for k, v in patches.statuses().items()},
    "counters": patches.counters(),
}))
"""

FORBIDDEN = ("astra_sglang.harness", "astra_sglang.loop", "astra_sglang.agents", "astra_sglang.extract",
             "astra_sglang.patches.tooling", "astra_sglang.cli")


def test_sglang_load_plugins_with_patches_on_imports_only_the_serving_side(tmp_path):
    """SGLang's real load_plugins() with every shipped patch requested by id (the retired test vehicle is out of
    'all'), then a first call (activation: build, check, serve): nothing of the harness, loop, agents, extract or
    offline tooling, and no multiprocessing from astra_sglang, enters a server process."""
    env = {k: v for k, v in os.environ.items() if k not in ("ASTRA_SGLANG_PATCHES", "SGLANG_PLUGINS")}
    shipped = sorted(p.parent.name for p in (REPO / "patches").glob("*/*/manifest.json"))
    env.update({
        "ASTRA_SGLANG_PATCHES": ",".join(shipped),
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": os.pathsep.join([str(_dist_info(tmp_path)), str(REPO)]),
        "ASTRA_SGLANG_PATCHES_DIR": str(REPO / "patches"),
        "ASTRA_SGLANG_STATE_FILE": str(tmp_path / "state.json"),
        "TRITON_CACHE_DIR": str(tmp_path / "triton-cache"),
    })
    proc = subprocess.run([sys.executable, "-c", SERVING_ONLY], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("CHILD-RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    res = json.loads(lines[-1][len("CHILD-RESULT "):])
    assert res["states"][PID][0] == "active", res["states"]        # positive control: the gate really ran
    assert res["counters"][PID] == {"patch": 1, "original": 0}
    assert "astra_sglang.checker" in res["astra"] and "astra_sglang.patches.runtime" in res["astra"]
    bad = [m for m in res["astra"] if m.startswith(FORBIDDEN)]
    assert bad == [], bad
    mp = [e for e in res["from_astra"] if e.split(" -> ")[1].split(".")[0] == "multiprocessing"]
    assert mp == [], mp


def test_entry_point_load_is_free_when_patches_are_off():
    code = textwrap.dedent("""
        import sys
        import astra_sglang.patches.plugin as plugin
        plugin.load()
        print("OFF", sorted(m for m in ("torch", "pydantic", "triton", "agents", "openai") if m in sys.modules))
    """)
    env = {k: v for k, v in os.environ.items() if k != "ASTRA_SGLANG_PATCHES"}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "OFF []" in proc.stdout, proc.stdout


INFO_LINES = r'''
infos = []
class _CollectInfo(logging.Handler):
    def emit(self, record):
        if record.levelno == logging.INFO:
            infos.append(record.getMessage())
logging.getLogger("astra_sglang").addHandler(_CollectInfo())
logging.getLogger("astra_sglang").setLevel(logging.INFO)
'''


def test_status_records_of_two_server_processes_add_up_in_patches_status(tmp_path, capsys):
    """Two processes of one server (one process group), each through SGLang's real load_plugins(), serve calls
    with the Triton patch; each writes its own record, and ``patches status`` adds them up per patch, with the
    refusal one of them logged, and the startup line each logged."""
    from astra_sglang.cli.main import main

    root = _patch_root(tmp_path)
    _variant(root, "version", manifest_edit=lambda m: setattr(m.validated_on, "sglang_versions", ["0.4.0"]))
    status_dir = tmp_path / "status"
    body = INFO_LINES + HAPPY.replace('res["warnings"] = records', 'res["warnings"] = records; res["info"] = infos')
    runs = []
    for name, select in (("a", PID), ("b", "all")):
        (tmp_path / name).mkdir()
        runs.append(_run_child(tmp_path / name, body, {"ASTRA_SGLANG_PATCHES": select,
                                                       "ASTRA_SGLANG_STATUS_DIR": str(status_dir)}, root))
    assert [r["after_covered_3d"] for r in runs] == [{"patch": 2, "original": 3}] * 2   # calls really served
    assert runs[0]["info"] == [f"astra-sglang: patches installed (checked at first call): {PID}"]
    assert runs[1]["info"] == [f"astra-sglang: patches installed (checked at first call): {PID}; refused: version "
                               "(SGLang 0.5.23 installed, patch validated on 0.4.0)"]
    groups = list(status_dir.glob("pg-*"))
    assert len(groups) == 1 and groups[0].name == f"pg-{os.getpgid(0)}"      # the children share our group
    assert len(list(groups[0].glob("*.json"))) == 2

    assert main(["patches", "status", "--dir", str(status_dir), "--json"]) == 0
    servers = json.loads(capsys.readouterr().out)["servers"]
    assert len(servers) == 1 and len(servers[0]["processes"]) == 2
    assert not any(p["running"] for p in servers[0]["processes"])           # the exit record says so
    rows = {r["patch_id"]: r for r in servers[0]["patches"]}
    silu = rows[PID]
    assert sorted(silu["states"].values()) == ["active", "active"]
    assert (silu["served_by_patch"], silu["served_by_original"]) == (4, 6)
    assert (silu["captured_by_patch"], silu["captured_by_original"]) == (0, 0)   # no CUDA graphs on CPU
    assert len(silu["first_call_checks"]) == 1 and silu["first_call_checks"][0].startswith("passed: checked on cpu")
    assert silu["fallbacks"] == []
    assert list(rows["version"]["states"].values()) == ["failed"]
    assert rows["version"]["reasons"] == ["SGLang 0.5.23 installed, patch validated on 0.4.0"]

    assert main(["patches", "status", "--dir", str(groups[0])]) == 0
    table = capsys.readouterr().out
    line = next(ln for ln in table.splitlines() if PID in ln)
    assert "active x2" in line and " 4 " in line and " 6 " in line, table
    assert "counted once" in table


OTHER_PLUGIN_FIRST = r'''
from pathlib import Path
from sglang.srt.plugins.hook_registry import HookSource, HookType
manifest = json.loads((Path(os.environ["ASTRA_SGLANG_PATCHES_DIR"]) / "silu_and_mul" / PID / "manifest.json").read_text())
def theirs(*args, **kwargs):
    return "theirs"
for target in manifest["targets"]:
    HookRegistry.register(target, theirs, HookType.REPLACE, source=HookSource("someone_else", None))
load_plugins()
st = patches.statuses()[PID]
emit(state=st.state, reason=st.reason, served_by_theirs=kact.silu_and_mul(torch.randn(2, 8)) == "theirs",
     ours=is_hook(kact.silu_and_mul), warnings=records)
'''


def test_a_call_site_another_plugin_hooked_first_is_left_to_it_with_one_line(tmp_path):
    """A REPLACE of ours would silently override the other plugin's hook (SGLang keeps the last REPLACE), and our
    fallback would be SGLang's original, not what that plugin serves. The patch is refused whole instead."""
    res = _run_child(tmp_path, OTHER_PLUGIN_FIRST, {"ASTRA_SGLANG_PATCHES": "all"}, _patch_root(tmp_path))
    assert res["state"] == "failed" and "someone_else" in res["reason"], res
    assert "never overrides another plugin's hook" in res["reason"]
    assert res["served_by_theirs"] and not res["ours"]
    assert len([w for w in res["warnings"] if PID in w]) == 1, res["warnings"]
