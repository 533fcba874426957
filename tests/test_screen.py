"""The static screen: each rule rejects a small snippet that breaks it (and names the rule), SGLang's own kernels
and every correct candidate in tests/candidates pass, and ``evaluate`` turns a finding into a build failure
before any worker starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from h_fixtures.ops import make_h_norm

from astra_sglang.contract.eval_config import EvalConfig
from astra_sglang.contract.op import CudaJitRecipe, load_manifest
from astra_sglang.harness import evaluate, screen_source
from astra_sglang.harness.parent import evaluate as evaluate_mod
from astra_sglang.harness.parent.evaluate import build_all
from astra_sglang.harness.parent.screen import screen_cuda, screen_python
from astra_sglang.loop.static_check import check_source

REPO = Path(__file__).resolve().parent.parent
EXTRACTED = REPO / "extracted"
CANDS = REPO / "tests" / "candidates"


def _rules(findings) -> list[str]:
    return [f.rule for f in findings]


# ------------------------------------------------------------------------------------ Python, one per rule

PY_RULES = {
    "forbidden-import": [
        ("import os\n", 1, "imports os"),
        ("import torch\nfrom sys import modules\n", 2, "imports sys"),
        ("import numpy as np\n", 1, "imports numpy"),
        ("from torch.utils import cpp_extension\n", 1, "cpp_extension"),
        ("import torch._dynamo\n", 1, "torch._dynamo"),
        ("from sglang.kernels.ops.attention import merge_state\n", 1, "must not import sglang"),
        ("import astra_sglang.harness.compare as c\n", 1, "astra_sglang"),
        ("from . import helper\n", 1, "relatively"),
    ],
    "forbidden-builtin": [
        ("eval('1 + 1')\n", 1, "eval"),
        ("x = 1\nexec('x = 2')\n", 2, "exec"),
        ("f = open\n", 1, "open"),
        ("g = globals()\n", 1, "globals"),
        ("import torch\nname = 'cuda'\ngetattr(torch, name)\n", 3, "computed name"),
        ("import torch\nsetattr(torch, 'cuda', None)\n", 2, "setattr"),
        ("import functools, torch\nc = functools.reduce(getattr, ['cuda'], torch)\n", 2, "as a value"),
        ("def f(x: \"__import__('os').system('true')\"):\n    pass\n", 1, "__import__"),
        ("def f(x: 'not an expression ('):\n    pass\n", 1, "annotation string"),
    ],
    "frame-access": [
        ("def f():\n    try:\n        1 / 0\n    except ZeroDivisionError as e:\n        return e.__traceback__\n", 5,
         "__traceback__"),
        ("def g(fr):\n    return fr.f_back.f_globals\n", 2, "f_back"),
        ("import operator\nget = operator.itemgetter('gi_frame')\n", 2, "gi_frame"),
    ],
    "dunder-access": [
        ("def f():\n    pass\nc = f.__globals__\n", 3, "__globals__"),
        ("x = ().__class__.__base__.__subclasses__()\n", 1, "__subclasses__"),
        ("import torch\nd = torch.cuda.__dict__\n", 2, "__dict__"),
        ("b = __builtins__\n", 1, "__builtins__"),
        ("import torch\nx = getattr(torch.cuda, '__dict__')\n", 2, "__dict__"),
    ],
    "forbidden-attribute": [
        ("import torch\ntorch.os.system('true')\n", 2, ".os"),
        ("import triton\nm = triton.runtime.jit.sys\n", 2, ".sys"),
        ("import torch\ntorch._C._cuda_synchronize()\n", 2, "_C"),
        ("import torch\ntorch.utils.cpp_extension.load_inline('m', '')\n", 2, "cpp_extension"),
        ("import torch\ntorch._dynamo.reset()\n", 2, "private torch._dynamo"),
        ("import torch\nt = torch.utils.benchmark.Timer(stmt='pass')\n", 2, "torch.utils.benchmark"),
        ("import torch\nu = torch.utils\nu.collect_env.run('true')\n", 3, "torch.utils.collect_env"),
        ("import triton\ntriton.runtime.cache.get_cache_manager('k')\n", 2, "triton.runtime.cache"),
        ("import typing\ntyping.get_type_hints(len)\n", 2, "get_type_hints"),
        ("import torch\ndef u():\n    return torch.utils\nu().benchmark.Timer(stmt='pass')\n", 4, "hides"),
    ],
    "file-access": [
        ("import torch\ntorch.save({}, 'astra_sglang/harness/compare.py')\n", 2, "torch.save"),
        ("import torch as T\nload = T.load\n", 2, "torch.load"),
    ],
    "global-state": [
        ("import torch\ntorch.manual_seed(0)\n", 2, "torch.manual_seed"),
        ("import torch\ntorch.set_default_dtype(torch.float64)\n", 2, "torch.set_default_dtype"),
        ("import torch\ntorch.cuda.set_stream(torch.cuda.Stream())\n", 2, "torch.cuda.set_stream"),
    ],
    "module-assignment": [
        ("import torch\ntorch.cuda.Event = object\n", 2, "torch.cuda.Event"),
        ("import triton\nt = triton.testing\nt.do_bench = lambda *a, **k: 1.0\n", 3, "t.do_bench"),
        ("from torch.cuda import Event\nEvent.elapsed_time = lambda *a: 0.0\n", 2, "Event.elapsed_time"),
        ("import torch, triton\nfor m in (torch, triton):\n    m.x = 1\n", 3, "m.x"),
        ("import torch\ntype(torch.empty(1)).add_ = None\n", 2, "call's result"),
        ("import torch\ndel torch.cuda.synchronize\n", 2, "deletes"),
        ("import torch\ntorch.backends.cudnn.enabled += 0\n", 2, "torch.backends"),
    ],
    "global-rebinding": [
        ("import torch\ndef f():\n    global torch\n    torch = None\n", 3, "torch"),
    ],
}


def _assert_rejected(screen, rule: str, cases: list[tuple[str, int, str]]) -> None:
    for source, line, word in cases:
        findings = screen(source)
        hit = next((f for f in findings if f.rule == rule and word in f.detail), None)
        assert hit is not None, f"{rule} not named for:\n{source}\ngot {[str(f) for f in findings]}"
        assert str(hit).startswith(f"screen: {rule}: line {line} "), (source, str(hit))


@pytest.mark.parametrize("rule", list(PY_RULES))
def test_each_python_rule_rejects_its_snippets_naming_the_rule_and_line(rule):
    _assert_rejected(screen_python, rule, PY_RULES[rule])


def test_python_code_that_only_looks_risky_passes():
    source = (
        "from __future__ import annotations\n"
        "import math, functools\n"
        "from typing import Optional\n"
        "import torch\nimport triton\nimport triton.language as tl\n"
        "from triton.language.extra import libdevice\n"
        "@triton.jit\ndef k(x, BLOCK: tl.constexpr):\n    tl.store(x + tl.arange(0, BLOCK), 0.0)\n"
        "@functools.lru_cache(maxsize=None)\ndef blocks(d: int) -> int:\n    return triton.next_power_of_2(d)\n"
        "class Cfg:\n    def __init__(self, n):\n        self.n = n\n"
        "conf = triton.Config({'BLOCK': 64}, num_warps=4)\nconf.num_stages = 2\n"
        "def run(out: torch.Tensor, out2: Optional[torch.Tensor] = None):\n"
        "    out[...] = 0\n    buf = torch.empty(3)\n    buf[1:] = math.inf\n    out.view(-1)[:2] = buf[:2]\n"
        "    cfg = Cfg(3)\n    cfg.n += 1\n"
        "    d = {}\n    d['a'] = getattr(out, 'shape')\n    if __name__ == '__main__':\n        pass\n"
        "    return out, blocks.__name__\n"
    )
    assert screen_python(source) == []


def test_unparsable_python_is_left_to_the_build():
    assert screen_python("def f(:\n") == []


# -------------------------------------------------------------------------------------- CUDA, one per rule

CUDA_RULES = {
    "forbidden-include": [
        ("#include <unistd.h>\n", 1, "unistd.h"),
        ("#include <cstdint>\n#include <thread>\n", 2, "thread"),
        ("#include \"../../../../../usr/include/x86_64-linux-gnu/sys/mman.h\"\n", 1, "outside the op folder"),
        ("#include <sys/syscall.h>\n", 1, "sys/syscall.h"),
        ("#define H <dlfcn.h>\n#include H\n", 2, "computed"),
        ("#include_next <cuda_runtime.h>\n", 1, "include_next"),
        ("#import <cstdio>\n", 1, "#import"),
        ("#include <execution>\n", 1, "execution"),  # std::execution::par runs a thread pool
    ],
    "python-api": [
        ("#include <Python.h>\n", 1, "Python.h"),
        ("void f() {\n  PyGILState_Ensure();\n}\n", 2, "PyGILState_Ensure"),
        ("#include <pybind11/pybind11.h>\n", 1, "pybind11"),
        ("struct S { PyObject* o; };\n", 1, "PyObject"),
    ],
    "dynamic-loading": [
        ("#include <dlfcn.h>\n", 1, "dlfcn.h"),
        ("void f() { void* h = dlopen(\"libpython3.11.so\", 2); }\n", 1, "dlopen"),
        ("void* f(void* h) {\n  return dlsym(h, \"PyRun_SimpleString\");\n}\n", 2, "dlsym"),
        ("int x = RTLD_DEFAULT;\n", 1, "RTLD_DEFAULT"),
    ],
    "process-control": [
        ("void f() { system(\"true\"); }\n", 1, "system"),
        ("void f() { if (fork() == 0) execve(\"/bin/sh\", 0, 0); }\n", 1, "fork"),
        ("void f() { std::thread t([] {}); t.detach(); }\n", 1, "std::thread"),
        ("int run(void*);\nvoid f(char* stack) { clone(run, stack, 0x100, nullptr); }\n", 2, "clone"),
        ("void f(pthread_t* t) { pthread_create(t, 0, 0, 0); }\n", 1, "pthread_"),
        ("void f() { auto r = std::async([] { return 1; }); }\n", 1, "std::async"),
        ("void f(void* p) { mprotect(p, 4096, 7); }\n", 1, "mprotect"),
        ("void f() { setenv(\"TRITON_INTERPRET\", \"0\", 1); }\n", 1, "setenv"),
        ("void* f() { return __builtin_frame_address(3); }\n", 1, "__builtin_frame_address"),
    ],
    "file-access": [
        ("#include <cstdio>\nvoid f() { FILE* fp = fopen(\"x\", \"w\"); }\n", 2, "fopen"),
        ("void f() { std::ofstream o(\"harness/compare.py\"); }\n", 1, "std::ofstream"),
        ("const char* p = \"/proc/self/mem\";\n", 1, "/proc/"),
        ("void f() {\n  std::remove(\"astra_sglang/harness/compare.py\");\n}\n", 2, "remove"),
    ],
    "symbol-interposition": [
        ("extern \"C\" int cudaEventElapsedTime(float* ms, void* a, void* b) { *ms = 0.f; return 0; }\n", 1,
         "extern \"C\""),
        ("void g() __attribute__((weak));\n", 1, "weak"),
        ("void h() __attribute__((alias(\"g\")));\n", 1, "alias"),
        ("#include <cuda_runtime.h>\ncudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {\n"
         "  *ms = 0.001f;\n  return cudaSuccess;\n}\n", 2, "cudaEventElapsedTime"),
        ("void* operator new(unsigned long n) { return nullptr; }\n", 1, "operator new"),
    ],
    "static-initializer": [
        ("__attribute__((constructor)) static void hook() {}\n", 1, "constructor"),
        ("[[gnu::destructor]] void bye() {}\n", 1, "destructor"),
        ("namespace {\nstruct Hook {\n  Hook() { int x = 0; (void)x; }\n};\nHook hook;\n}\n", 5, "class Hook"),
        ("static int run_at_load = [] { return 1; }();\n", 1, "lambda"),
        ("namespace a {\nint x = compute();\n}\n", 2, "compute"),
        ("namespace a {\nstd::string s(make_name(), 3);\n}\n", 2, "constructed with arguments"),
        ("struct R { int a; };\nR r{make_r()};\n", 2, "make_r"),
        ("struct Hook {\n  Hook(int) {}\n};\nHook h(1);\n", 4, "h constructed with arguments"),
        ("#pragma init(hook)\n", 1, "#pragma init"),
        ("__attribute__((section(\".init_array\"))) void* p = 0;\n", 1, "section"),
        ("struct Holder {\n  static inline int hooked = install_hook();\n};\n", 2, "static member hooked"),
    ],
    "host-asm": [
        ("asm(\".section .init_array\\n.quad hook\");\n", 1, "namespace scope"),
        ("__device__ void f() {\n  asm volatile(\"syscall\");\n}\n", 2, "syscall"),
        ("void f() { asm volatile(\"mov $60, %eax; int $0x80\"); }\n", 1, "int $0x80"),
    ],
    "token-pasting": [
        ("#define JOIN(a, b) a##b\n", 1, "two macro parameters"),
        ("#define OPEN(x) dl##x\n", 1, "'dl'"),
        ("#define API(x) Py##x\n", 1, "'Py'"),
    ],
}


@pytest.mark.parametrize("rule", list(CUDA_RULES))
def test_each_cuda_rule_rejects_its_snippets_naming_the_rule_and_line(rule):
    _assert_rejected(screen_cuda, rule, CUDA_RULES[rule])


def test_cuda_code_that_only_looks_risky_passes():
    source = r"""
#include <cstdint>
#include <cuda_runtime.h>
#include <tvm/ffi/container/tensor.h>
#define KHAS(NAME) static constexpr bool kHas_##NAME = true;
#define LOG(fmt, ...) printf(fmt, ##__VA_ARGS__)
namespace astra {
constexpr int kVec = sizeof(float4) / sizeof(float);
inline constexpr auto kTable = [] { return 3; }();
struct Params { int n; float eps; };
Params defaults{4, 1e-6f};
int sizes[3] = {1, 2, 3};
__device__ float g_scale = 1.0f;
__constant__ float c_weights[16];
const float kHalf = 0.5f;
void declared(int n, const float* x);
template <int N = 4> __device__ void kernel_helper(float* x) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm("mov.u32 %0, %%laneid;" : "=r"(*reinterpret_cast<unsigned*>(x)));
}
struct Launcher {
  Launcher() = default;
  static void run(cudaStream_t s) {
    static cudaStream_t side = [] { cudaStream_t t; cudaStreamCreate(&t); return t; }();  // function-local
    (void)side; (void)s;
  }
};
}  // namespace astra
// a comment naming dlopen, fork() and Py_Initialize is not code
/* neither is extern "C" in a block comment */
const char* kMessage = "system( and PyRun in a string are not calls";
inline int cudaShimForRocm(int* x) { return *x; }  // SGLang's ROCm shims define inline cuda* functions
auto act = [](float v) { return expf(v); };  // a lambda object: its body runs only when called
Launcher make_launcher(Params);  // a declaration with an unnamed parameter, not an object
struct Node { Node* clone() const; void f() { clone(); this->clone(); Node::clone(); } };
inline void drop_zeros(int* a, int* b) { std::remove(a, b, 0); }  // the algorithm, not the file call
extern "C" __device__ float __nv_tanhf(float);  // a device symbol: libdevice, not the host's
extern "C" {
__device__ unsigned __nvvm_get_smem_pointer(void*);
}
const dim3 kCluster(4, 1, 1);  // literal arguments: constant initialisation
Node combine(int last, const std::vector<int32_t>& paths);
#define TRAP_UNLESS(cond) \
do { \
  if (!(cond)) asm("trap;"); \
} while (0)
struct Tag { static inline constexpr int kId = id_of(3); };
"""
    assert screen_cuda(source) == [], [str(f) for f in screen_cuda(source)]


# ------------------------------------------------------------------- SGLang's own kernels and our candidates


def _ops() -> list[Path]:
    return sorted(p for p in EXTRACTED.iterdir() if (p / "manifest.json").is_file()) if EXTRACTED.is_dir() else []


# Known gap (issue 10): the screen does not yet allow a vendored Python closure's imports (logging, msgspec,
# sglang.srt.environ resolved to the private package), so a candidate copying these originals would be refused.
_CLOSURE_GAP = {"apply_token_bitmask_inplace_triton", "concat_and_cast_mha_k_triton", "decode_attention",
                "extend_attention", "fused_moe_down", "fused_moe_kernel", "pad_verify_lens_to_bucket_triton"}


@pytest.mark.parametrize("op", [pytest.param(p, marks=pytest.mark.xfail(
    strict=True, reason="the screen refuses imports of the vendored closure")) if p.name in _CLOSURE_GAP else p
    for p in _ops()], ids=lambda p: p.name)
def test_every_extracted_source_and_header_passes(op, restored_op):
    """SGLang's (and FlashInfer's baseline) kernels, every file the extraction copied: the rules must fit them."""
    restored_op(op.name)
    m = load_manifest(op)
    dirs = [op / d for r in [m.recipe] + [b.recipe for b in m.baselines] if isinstance(r, CudaJitRecipe)
            for d in r.include_dirs]
    files = [p for sub in ("src", "glue", "baseline_src") for p in sorted((op / sub).rglob("*"))
             if p.suffix in (".py", ".cuh", ".cu", ".h", ".hpp")]
    assert files
    for f in files:
        found = screen_python(f.read_text()) if f.suffix == ".py" else screen_cuda(f.read_text(), [f.parent, *dirs], op)
        assert found == [], f"{f.relative_to(op)}: {[str(x) for x in found]}"
    source = op / (m.recipe.source if m.source_kind == "triton" else m.recipe.sources[0])
    assert screen_source(source.read_text(), op, m) == []  # the original as a candidate of itself


# candidates in tests/candidates the screen must reject (and with which rule); every other one must pass
SCREENED = {
    "merge_state/h_exits.py": "forbidden-import",
    "merge_state/h_imports_sglang.py": "forbidden-import",
    "merge_state/broken/kills_worker.py": "forbidden-import",
    "merge_state/broken/hangs.py": "forbidden-import",
    # adversarial candidates of the harness's own defences (tests/test_harness_cheats.py runs them unscreened)
    "merge_state/cheats/forges_times.py": "forbidden-import",
    "merge_state/cheats/rebinds_checker.py": "forbidden-import",
    "merge_state/cheats/rebinds_original.py": "forbidden-import",
    "merge_state/cheats/scales_timer.py": "forbidden-import",
    "merge_state/cheats/wrong_return.py": "forbidden-import",
    "merge_state/cheats/loads_machine_while_original_is_timed.py": "forbidden-import",
    "merge_state/cheats/queues_gpu_work_while_original_is_timed.py": "forbidden-import",
    "merge_state/cheats/skips_work_in_timed_replays.py": "forbidden-import",
    "merge_state/cheats/memoises_by_fingerprint.py": "forbidden-import",
    # the OS sandbox's own attacks (tests/test_integrity2_sandbox.py runs them unscreened)
    "merge_state/cheats/poisons_the_judges_files.py": "forbidden-import",
    "merge_state/cheats/signals_the_judge.py": "forbidden-import",
    "merge_state/cheats/execs_a_shell.py": "forbidden-import",
    "merge_state/cheats/reads_the_heldout_secret.py": "forbidden-import",
    "fused_add_rmsnorm/cheats/static_ctor_python.cuh": "symbol-interposition",
}


# candidates of the tests' own ops (tests/h_fixtures), which have no extracted/ folder: screened against the fixture
FIXTURE_OPS = {"h_norm": make_h_norm}


def _candidates() -> list[Path]:
    return sorted(p for p in CANDS.rglob("*") if p.suffix in (".py", ".cuh"))


@pytest.mark.parametrize("cand", _candidates(), ids=lambda p: str(p.relative_to(CANDS)))
def test_every_candidate_in_the_repo_gets_the_screen_verdict_it_is_labelled_with(cand, restored_op, tmp_path):
    name = cand.relative_to(CANDS).parts[0]
    op = FIXTURE_OPS[name](tmp_path) if name in FIXTURE_OPS else restored_op(name)
    found = screen_source(cand.read_text(), op, load_manifest(op))
    expected = SCREENED.get(str(cand.relative_to(CANDS)))
    if expected is None:
        assert found == [], [str(f) for f in found]
    else:
        assert found and found[0].rule == expected


# ------------------------------------------------------------------------------------------- the verdicts

MERGE = EXTRACTED / "merge_state"
CPU = EvalConfig(shapes="test", dtypes=["bfloat16"], device="cpu", timeout_s=25, seed=1234)
# The first cheat of issue 9: at import, replace the worker's checking function so every case is "correct".
CHECKER_REBIND = ("import sys\n"
                  "sys.modules['astra_sglang.harness.compare'].compare = lambda *a, **k: None\n")
# The third: a .cuh whose static constructor reaches into the Python interpreter.
STATIC_CTOR_INTO_PYTHON = """
extern "C" int PyRun_SimpleString(const char*);
namespace {
struct Hijack {
  Hijack() { PyRun_SimpleString("import astra_sglang.harness.compare as c; c.compare = lambda *a, **k: None"); }
};
Hijack hijack;
}  // namespace
"""


def test_evaluate_rejects_a_screened_candidate_with_the_rule_before_any_worker_starts(tmp_path, monkeypatch,
                                                                                      restored_op):
    restored_op(MERGE.name)
    cand = tmp_path / "cheat.py"
    cand.write_text(CHECKER_REBIND + (CANDS / "merge_state" / "h_correct.py").read_text())
    started = []
    real = evaluate_mod.run_checker
    monkeypatch.setattr(evaluate_mod, "run_checker", lambda *a, **k: started.append(a) or real(*a, **k))
    r = evaluate(MERGE, cand, CPU)
    assert not r.ok and not r.build.ok and started == []
    assert r.error == "build failed: screen: forbidden-import: line 1 imports sys (forbidden)"
    assert r.correctness is None and r.timing is None


def test_the_loops_form_check_reports_the_same_rule(restored_op):
    restored_op(MERGE.name)
    m = load_manifest(MERGE)
    original = (MERGE / m.recipe.source).read_text()
    assert check_source(original, MERGE, m) is None
    expected = "screen: forbidden-import: line 1 imports sys (forbidden)"
    assert check_source(CHECKER_REBIND + original, MERGE, m) == expected


FAR = EXTRACTED / "fused_add_rmsnorm"


def test_a_cuda_static_constructor_calling_into_python_is_screened_out(restored_op):
    restored_op(FAR.name)
    source = (CANDS / "fused_add_rmsnorm" / "hand_written.cuh").read_text() + STATIC_CTOR_INTO_PYTHON
    found = screen_source(source, FAR, load_manifest(FAR))
    assert {"python-api", "symbol-interposition", "static-initializer"} <= set(_rules(found))


@pytest.mark.nvcc
def test_build_all_never_compiles_a_screened_cuda_candidate(tmp_path, restored_op):
    restored_op(FAR.name)
    cheat = tmp_path / "cheat.cuh"
    cheat.write_text((CANDS / "fused_add_rmsnorm" / "hand_written.cuh").read_text() + STATIC_CTOR_INTO_PYTHON)
    (report,) = build_all(FAR, load_manifest(FAR), [cheat], ["bfloat16"], EvalConfig(cache_dir=tmp_path / "c"))
    assert not report.ok and report.seconds == 0.0 and not report.resources
    assert report.log.splitlines()[-1].startswith("screen: python-api: line ")
    units = list((tmp_path / "c").rglob("cuda.cu"))  # the original's build only: the candidate never reached nvcc
    assert len(units) == 1 and str(cheat) not in units[0].read_text()


@pytest.mark.gpu
def test_gpu_evaluate_rejects_the_static_constructor_cheat_with_the_rule(tmp_path):
    cheat = tmp_path / "cheat.cuh"
    cheat.write_text((CANDS / "fused_add_rmsnorm" / "hand_written.cuh").read_text() + STATIC_CTOR_INTO_PYTHON)
    r = evaluate(FAR, cheat, EvalConfig(shapes="test", timing=False))
    assert not r.ok and r.correctness is None
    assert r.error.startswith("build failed: screen: python-api: line ")
