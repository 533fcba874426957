"""Two fused-MoE patches chained on SGLang's one ``invoke_fused_moe_kernel``, run end to end under the Triton
interpreter (tests/test_patches_fused_moe_cpu.py runs this in a fresh process with TRITON_INTERPRET=1 and the
patch folder in ASTRA_SGLANG_PATCHES_DIR). The kernel is hand-written, not model-written
(tests/candidates/fused_moe_kernel/hand_written.py); the original is SGLang's source rebuilt from the extracted folders.
Prints one line the test reads; any failed assertion exits non-zero."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from astra_sglang.cli.main import main
from astra_sglang.contract.patch import GuardSpec, load_patch_manifest, write_patch_manifest
from astra_sglang.patches import counters, install, status
from astra_sglang.patches.adapters import get_adapter
from astra_sglang.patches.adapters.base import dim_ranges
from astra_sglang.patches.registry import discover
from astra_sglang.patches.tooling.devcheck import extracted_original

REPO = Path(__file__).resolve().parents[1]
TARGET = "sglang.kernels.ops.moe.fused_moe_triton_kernels.invoke_fused_moe_kernel"
SMALL = {"T": 3, "TK": 2, "E": 4, "BM": 16, "BN": 32, "BK": 32, "GM": 1, "NW": 4, "NS": 2}
GEMM = {"fused_moe_kernel": {"N": 64, "K": 64}, "fused_moe_down": {"H": 64, "I": 64}}


def add_patches(root: Path) -> None:
    src = REPO / "tests" / "candidates" / "fused_moe_kernel" / "hand_written.py"
    for op, pid in (("fused_moe_kernel", "hw-moe-up"), ("fused_moe_down", "hw-moe-down")):
        assert main(["patches", "add", "--op", op, "--source", str(src), "--id", pid, "--provenance", "hand-written",
                     "--sglang-version", "0.5.23", "--arch", "cpu-interpret"]) == 0
        d = root / op / pid
        m = load_patch_manifest(d)
        assert m.targets == [TARGET], m.targets
        m.check_shapes = [{**SMALL, **GEMM[op]}]  # small: the interpreter is slow
        widths = {k: (8, 128, 8) for k in GEMM[op]}
        # the interpreter computes bfloat16 dots on the raw bits; the default guard spans the contract's model
        # widths (E >= 8, K >= 2048), far above what the interpreter runs in seconds
        m.guard = GuardSpec(dtypes=["float16"], dims=dim_ranges(T=(1, 64, 1), TK=(1, 8, 1), E=(1, 16, 1), **widths))
        m.in_all = True
        write_patch_manifest(d, m)
        status.reset(pid)


def main_() -> None:
    assert os.environ.get("TRITON_INTERPRET") == "1"
    root = Path(os.environ["ASTRA_SGLANG_PATCHES_DIR"])
    add_patches(root)
    entries = {e.manifest.op: e for e in discover() if e.manifest is not None}
    by_form = {op: extracted_original(e) for op, e in entries.items()}

    def sglang_original(*args: Any, **kwargs: Any) -> Any:  # SGLang's one function: both forms
        for op, fn in by_form.items():
            if get_adapter(op).prepare(*args, **kwargs) is not None:
                return fn(*args, **kwargs)
        raise AssertionError("a call form neither contract covers reached the scenario's original")

    install.resolve_target = lambda target: sglang_original  # type: ignore[assignment]
    registered: list[tuple[str, Any]] = []
    installed = install.install_selected(lambda target, original, hook: registered.append((target, hook)),
                                         root=root, value="all", sglang_version="0.5.23")
    assert sorted(installed) == ["hw-moe-down", "hw-moe-up"], installed
    assert [t for t, _ in registered] == [TARGET], registered
    hook = registered[0][1]
    for op in ("fused_moe_kernel", "fused_moe_down"):
        ad = get_adapter(op)
        dims = {**SMALL, **GEMM[op]}
        args, kwargs = ad.sample(dims, torch.float16, "cpu", 7)
        ref_args, ref_kwargs = ad.sample(dims, torch.float16, "cpu", 7)
        hook(*args, **kwargs)
        by_form[op](*ref_args, **ref_kwargs)
        got, want = ad.outputs(args, kwargs, None)["C"], ad.outputs(ref_args, ref_kwargs, None)["C"]
        assert torch.allclose(got.float(), want.float(), atol=2e-2, rtol=2e-2), op
    states = status.statuses()
    assert states["hw-moe-up"].state == "active" and states["hw-moe-down"].state == "active", states
    assert counters()["hw-moe-up"] == {"patch": 1, "original": 0}, counters()
    assert counters()["hw-moe-down"] == {"patch": 1, "original": 0}, counters()
    # bfloat16: the up form, outside its guard here (float16 only); the original serves it, counted by the up patch
    args, kwargs = get_adapter("fused_moe_kernel").sample({**SMALL, **GEMM["fused_moe_kernel"]}, torch.bfloat16,
                                                          "cpu", 8)
    hook(*args, **kwargs)
    assert counters()["hw-moe-up"] == {"patch": 1, "original": 1}, counters()
    assert counters()["hw-moe-down"] == {"patch": 1, "original": 0}, counters()
    # the outer patch (down) failed: calls of the up form still reach the up patch, and down-form calls the original
    status.fail("hw-moe-down", "failed on purpose by the scenario", "fused_moe_down")
    args, kwargs = get_adapter("fused_moe_kernel").sample({**SMALL, **GEMM["fused_moe_kernel"]}, torch.float16,
                                                          "cpu", 9)
    hook(*args, **kwargs)
    args, kwargs = get_adapter("fused_moe_down").sample({**SMALL, **GEMM["fused_moe_down"]}, torch.float16, "cpu", 9)
    hook(*args, **kwargs)
    assert counters()["hw-moe-up"] == {"patch": 2, "original": 1}, counters()
    assert counters()["hw-moe-down"] == {"patch": 1, "original": 1}, counters()
    up, down = counters()["hw-moe-up"], counters()["hw-moe-down"]
    print(f"chained: up {up['patch']}/{up['original']}, down {down['patch']}/{down['original']}, one registration")


if __name__ == "__main__":
    main_()
