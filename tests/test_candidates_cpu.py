"""The candidate fixtures under tests/candidates behave as their labels say.

The harness and loop tests rely on these files: the good merge_state candidates must really be the same
function as SGLang's merge_state_triton, and each broken one must really have the one defect its header
states (otherwise a harness test "rejecting" it proves nothing). Triton runs under TRITON_INTERPRET=1 on CPU.
The CUDA fixtures are compiled (not run) by the nvcc-marked tests at the end.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from astra_sglang.loader import toolchain

ROOT = Path(__file__).resolve().parents[1]
CAND = ROOT / "tests" / "candidates"
MS = CAND / "merge_state"
SCRIPTED_LABEL = "SCRIPTED candidate written by the astra-sglang developers for tests; not produced by a language model"


def _load(path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    # Triton reads TRITON_INTERPRET when a kernel is decorated, i.e. while the module executes.
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    spec = importlib.util.spec_from_file_location(f"cand_{path.parent.name}_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _inputs(T: int, H: int, D: int, dtype: torch.dtype, seed: int = 0, special: bool = True) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    po = torch.randn(T, H, D, generator=g).to(dtype)
    so = torch.randn(T, H, D, generator=g).to(dtype)
    pl = torch.randn(T, H, generator=g) * 4
    sl = torch.randn(T, H, generator=g) * 4
    if special and T * H >= 3:
        pl.view(-1)[0] = float("inf")  # read as -inf by the op
        sl.view(-1)[1] = float("-inf")
        pl.view(-1)[2] = 60.0
    return [po, pl, so, sl]


def _reference(po: torch.Tensor, pl: torch.Tensor, so: torch.Tensor,
               sl: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    pl = torch.where(pl == float("inf"), float("-inf"), pl.double())
    sl = torch.where(sl == float("inf"), float("-inf"), sl.double())
    m = torch.maximum(pl, sl)
    a, b = torch.exp(pl - m), torch.exp(sl - m)
    se = a + b
    return po.double() * (a / se)[..., None] + so.double() * (b / se)[..., None], torch.log(se) + m


TOL = {torch.bfloat16: 2e-2, torch.float16: 2e-3, torch.float32: 1e-5}


def _matches_reference(mod: Any, T: int, H: int, D: int, dtype: torch.dtype) -> bool:
    args = _inputs(T, H, D, dtype)
    out = torch.full_like(args[0], float("nan"))
    out_lse = torch.full_like(args[1], float("nan"))
    got, got_lse = mod.merge_state_triton(*args, output=out, output_lse=out_lse)
    assert got is out and got_lse is out_lse
    ref, ref_lse = _reference(*args)
    tol = TOL[dtype]
    return bool(
        torch.allclose(out.double(), ref, atol=tol, rtol=tol)
        and torch.allclose(out_lse.double(), ref_lse, atol=1e-5, rtol=1e-5)
    )


GOOD = [MS / "hand_written.py", MS / "scripted" / "r3.py", MS / "scripted" / "r4.py", MS / "scripted" / "r5.py"]
SHAPES = [(3, 5, 128, torch.bfloat16), (2, 3, 96, torch.float16), (5, 2, 64, torch.float32),
          (1, 4, 256, torch.bfloat16)]


@pytest.mark.parametrize("path", GOOD, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_good_merge_state_candidates_match_float64_reference(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _load(path, monkeypatch)
    for T, H, D, dt in SHAPES:
        assert _matches_reference(mod, T, H, D, dt), (T, H, D, dt)


def test_hand_written_merge_state_is_bitwise_the_original(monkeypatch: pytest.MonkeyPatch, restored_op) -> None:
    op = restored_op("merge_state")
    orig = _load(op / "src" / "kernels" / "ops" / "attention" / "merge_state.py", monkeypatch)
    cand = _load(MS / "hand_written.py", monkeypatch)
    for T, H, D, dt in SHAPES:
        args = _inputs(T, H, D, dt)
        o1, l1 = orig.merge_state_triton(*args)
        o2, l2 = cand.merge_state_triton(*args)
        assert torch.equal(o1, o2) and torch.equal(l1, l2), (T, H, D, dt)


def test_hand_written_merge_state_defaults_allocate_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    cand = _load(MS / "hand_written.py", monkeypatch)
    args = _inputs(2, 3, 32, torch.float32, special=False)
    out, out_lse = cand.merge_state_triton(*args)
    ref, ref_lse = _reference(*args)
    assert out.shape == args[0].shape and out_lse.shape == args[1].shape
    assert torch.allclose(out.double(), ref, atol=1e-5) and torch.allclose(out_lse.double(), ref_lse, atol=1e-5)


# ----------------------------------------------------------------------------------- broken fixtures


def _broken(name: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    return _load(MS / "broken" / f"{name}.py", monkeypatch)


def test_wrong_on_one_shape_is_right_elsewhere_and_wrong_at_40_heads(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _broken("wrong_on_one_shape", monkeypatch)
    assert _matches_reference(mod, 2, 4, 64, torch.float32)
    assert _matches_reference(mod, 2, 32, 32, torch.float32)
    assert not _matches_reference(mod, 2, 5, 64, torch.float32)
    assert not _matches_reference(mod, 1, 40, 32, torch.float32)


def test_partial_write_leaves_prefilled_nan(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _broken("partial_write", monkeypatch)
    args = _inputs(3, 4, 64, torch.float32, special=False)
    out = torch.full_like(args[0], float("nan"))
    mod.merge_state_triton(*args, output=out)
    assert out[:, :-1].isfinite().all() and out[:, -1].isnan().all()


def test_stale_output_returns_the_first_result_for_reused_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _broken("stale_output", monkeypatch)
    args = _inputs(2, 3, 64, torch.float32, special=False)
    out = torch.empty_like(args[0])
    mod.merge_state_triton(*args, output=out)
    first = out.clone()
    for t, new in zip(args, _inputs(2, 3, 64, torch.float32, seed=1, special=False), strict=True):
        t.copy_(new)  # fresh data at the same addresses
    mod.merge_state_triton(*args, output=out)
    ref, _ = _reference(*args)
    assert torch.equal(out, first) and not torch.allclose(out.double(), ref, atol=1e-3)


def test_mutates_input_changes_prefix_lse(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _broken("mutates_input", monkeypatch)
    args = _inputs(2, 3, 64, torch.float32, special=False)
    before = [a.clone() for a in args]
    ref, ref_lse = _reference(*before)
    out, out_lse = mod.merge_state_triton(*args)
    assert torch.allclose(out.double(), ref, atol=1e-5)  # the outputs are right ...
    assert not torch.equal(args[1], before[1])  # ... but an input was changed
    assert all(torch.equal(a, b) for i, (a, b) in enumerate(zip(args, before, strict=True)) if i != 1)


def test_produces_nan_only_when_output_buffer_holds_nan(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _broken("produces_nan", monkeypatch)
    args = _inputs(2, 3, 64, torch.float32, special=False)
    ref, _ = _reference(*args)
    zeros = torch.zeros_like(args[0])
    mod.merge_state_triton(*args, output=zeros)
    assert torch.allclose(zeros.double(), ref, atol=1e-5)
    nan = torch.full_like(args[0], float("nan"))
    mod.merge_state_triton(*args, output=nan)
    assert nan.isnan().all()


def test_hangs_never_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _broken("hangs", monkeypatch)
    args = _inputs(1, 2, 32, torch.float32, special=False)
    t = threading.Thread(target=mod.merge_state_triton, args=args, daemon=True)
    t.start()
    t.join(timeout=1.0)
    assert t.is_alive()


def test_kills_worker_dies_with_sigsegv() -> None:
    code = (
        "import importlib.util, torch\n"
        f"spec = importlib.util.spec_from_file_location('k', {str(MS / 'broken' / 'kills_worker.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "t = torch.zeros(1, 2, 32); l = torch.zeros(1, 2)\n"
        "m.merge_state_triton(t, l, t, l)\n"
        "print('survived')\n"
    )
    env = dict(os.environ, TRITON_INTERPRET="1")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == -signal.SIGSEGV and "survived" not in p.stdout


# ----------------------------------------------------------------------------------- scripted rounds


@pytest.mark.parametrize("op", ["merge_state", "fused_add_rmsnorm", "silu_and_mul"])
def test_scripted_index_lists_five_labelled_rounds(op: str) -> None:
    index = json.loads((CAND / op / "scripted" / "scripted.json").read_text())
    assert SCRIPTED_LABEL in index["label"]
    rounds = index["rounds"]
    assert [r["round"] for r in rounds] == [1, 2, 3, 4, 5]
    verdicts = [r["expected_verdict"] for r in rounds]
    assert verdicts[0] == "build_failed" and "incorrect" in verdicts and "correct_slower" in verdicts
    for r in rounds:
        text = (CAND / op / "scripted" / r["file"]).read_text()
        assert SCRIPTED_LABEL in text.splitlines()[0] or SCRIPTED_LABEL in text[:400]
    assert (CAND / op / "scripted" / index["expected_winner"]).exists()


def test_scripted_merge_state_round1_does_not_parse_and_round2_is_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SyntaxError):
        _load(MS / "scripted" / "r1.py", monkeypatch)
    r2 = _load(MS / "scripted" / "r2.py", monkeypatch)
    assert not _matches_reference(r2, 2, 3, 64, torch.float32)


def test_every_fixture_states_what_it_is() -> None:
    for p in CAND.glob("*/hand_written.*"):
        assert "hand-written" in p.read_text()[:600].lower(), p
    for p in CAND.glob("*/broken/*"):
        head = p.read_text()[:1500]
        assert "BROKEN" in head and "What must catch it" in head, p
    for p in CAND.glob("*/cheats/*"):
        head = p.read_text()[:1500]
        assert "ADVERSARIAL" in head and "Attack:" in head and "What must catch it" in head, p


# ----------------------------------------------------------------------------------- CUDA fixtures (nvcc)

EXPECT_BUILD_FAIL = {"compile_error", "r1"}


CUDA_FILES = sorted(CAND.glob("*/*.cuh")) + sorted(CAND.glob("*/*/*.cuh"))


@pytest.mark.nvcc
@pytest.mark.parametrize("path", CUDA_FILES, ids=lambda p: str(p.relative_to(CAND)))
def test_cuda_fixture_compiles_for_sm90a_unless_meant_not_to(path: Path, tmp_path: Path, restored_op) -> None:
    nvcc = toolchain.nvcc_path()
    inc = restored_op("silu_and_mul") / "src" / "kernels" / "jit" / "include"  # SGLang's sgl_kernel/ headers
    import tvm_ffi.libinfo

    op = path.relative_to(CAND).parts[0]
    if op == "fused_add_rmsnorm":
        export, flags = "FusedAddRMSNormKernel<false, bf16_t>::run", []
    else:
        export, flags = "ActivationKernel<bf16_t, true>::run_activation", ["--use_fast_math"]
    (tmp_path / "cuda.cu").write_text(
        "#include <tvm/ffi/container/tensor.h>\n#include <tvm/ffi/function.h>\n"
        f'#include "{path}"\nnamespace sglang {{ TVM_FFI_DLL_EXPORT_TYPED_FUNC(entry, ({export})); }}\n'
    )
    cmd = [
        str(nvcc), "-gencode=arch=compute_90a,code=sm_90a", "-DSGL_CUDA_ARCH=900",
        "-std=c++20", "-O3", "--expt-relaxed-constexpr", "-Xcompiler", "-fPIC", "-Xptxas=-v", *flags,
        f"-I{tvm_ffi.libinfo.find_include_path()}", f"-I{inc}", "-c", str(tmp_path / "cuda.cu"),
        "-o", str(tmp_path / "x.o"),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if path.stem in EXPECT_BUILD_FAIL:
        assert p.returncode != 0 and "error" in p.stderr
    else:
        assert p.returncode == 0, p.stderr[-3000:]
        assert "spill stores" in p.stderr  # the resource report the harness parses is there
