"""Small extracted-op folders of our own for the loader and harness tests (no SGLang files needed).

``h_scale``: a CUDA JIT op (our .cuh) for compile-only tests on CPU. ``h_merge``: a Triton op with
merge_state's signature (our kernel) for harness tests under TRITON_INTERPRET=1 before/without extract.
``h_norm``: fused_add_rmsnorm's signature with an original that refuses H > 64 and an eager torch baseline the
manifest says SGLang serves there (``Baseline.serves``), for the served-kernel checks and timing on CPU.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from astra_sglang.contract.op import (
    Baseline,
    CudaExport,
    CudaJitRecipe,
    Dim,
    DimBound,
    Inputs,
    Manifest,
    Reference,
    ScalarArg,
    ServeRule,
    ShapeCase,
    Signature,
    SourceFile,
    TensorArg,
    Tolerance,
    TorchRecipe,
    TritonRecipe,
    write_manifest,
)

HERE = Path(__file__).parent


def _files(op_dir: Path, entries: list[tuple[str, str]]) -> list[SourceFile]:
    return [SourceFile(path=p, origin="astra", sha256=hashlib.sha256((op_dir / p).read_bytes()).hexdigest(),
                       role=role, committed=True) for p, role in entries]


def make_h_scale(dst: Path) -> Path:
    op = dst / "h_scale"
    shutil.copytree(HERE / "h_scale", op)
    recipe = CudaJitRecipe(
        module_name="h_scale", sources=["src/h_scale.cuh"], include_dirs=["src"],
        template_args={"float32": "float", "bfloat16": "__nv_bfloat16", "float16": "__half"},
        exports=[CudaExport(name="h_scale", symbol="HScaleKernel<{targs}>::run")], entry="h_scale",
        call=["x", "out", "alpha"], cuda_cflags=["-DSGL_CUDA_ARCH=900", "-std=c++20", "-O3",
                                                 "--expt-relaxed-constexpr"])
    m = Manifest(
        op_id="test.h_scale", short_name="h_scale", sglang_version="none", source_kind="cuda_jit",
        entry_point="tests:h_scale", files=_files(op, [("src/h_scale.cuh", "kernel"), ("src/h_scale_math.h", "header"),
                                 ("reference.py", "reference")]),
        recipe=recipe,
        signature=Signature(
            dims=[Dim(name="T", meaning="tokens"), Dim(name="H", meaning="hidden", multiple_of=8)],
            tensors=[TensorArg(name="x", role="input", shape=["T", "H"], dtype="{dtype}"),
                     TensorArg(name="out", role="output", shape=["T", "H"], dtype="{dtype}")],
            scalars=[ScalarArg(name="alpha", type="float", default=0.5)],
            dtypes=["bfloat16", "float16", "float32"]),
        reference=Reference(path="reference.py", origin="written"),
        tolerances={"bfloat16": Tolerance(atol=1e-2, rtol=1e-2), "float16": Tolerance(atol=1e-3, rtol=1e-3),
                    "float32": Tolerance(atol=1e-5, rtol=1e-5)},
        shapes=[ShapeCase(dims={"T": 4, "H": 64}, tags=["test", "decode"], source="fixture"),
                ShapeCase(dims={"T": 1024, "H": 4096}, tags=["paper", "prefill"], source="fixture")],
    )
    write_manifest(op, m)
    return op


def make_h_merge(dst: Path) -> Path:
    op = dst / "h_merge"
    shutil.copytree(HERE / "h_merge", op)
    # the kernel is our correct merge_state candidate, so the fixture and the candidate cannot drift apart
    shutil.copy(HERE.parent / "candidates" / "merge_state" / "h_correct.py", op / "h_merge.py")
    lse = ["+inf", "-inf"]
    m = Manifest(
        op_id="test.h_merge", short_name="h_merge", sglang_version="none", source_kind="triton",
        entry_point="tests:merge_state_triton",
        files=_files(op, [("h_merge.py", "kernel"), ("reference.py", "reference")]),
        recipe=TritonRecipe(source="h_merge.py", wrapper="merge_state_triton", kernels=["_h_merge_kernel"],
                            call=["prefix_output", "prefix_lse", "suffix_output", "suffix_lse", "output",
                                  "output_lse"]),
        signature=Signature(
            dims=[Dim(name="T", meaning="tokens"), Dim(name="H", meaning="heads"),
                  Dim(name="D", meaning="head dim", multiple_of=8)],
            tensors=[TensorArg(name="prefix_output", role="input", shape=["T", "H", "D"], dtype="{dtype}"),
                     TensorArg(name="prefix_lse", role="input", shape=["T", "H"], dtype="float32",
                               special_values=lse, align_bytes=4),
                     TensorArg(name="suffix_output", role="input", shape=["T", "H", "D"], dtype="{dtype}"),
                     TensorArg(name="suffix_lse", role="input", shape=["T", "H"], dtype="float32",
                               special_values=lse, align_bytes=4),
                     TensorArg(name="output", role="output", shape=["T", "H", "D"], dtype="{dtype}"),
                     TensorArg(name="output_lse", role="output", shape=["T", "H"], dtype="float32",
                               align_bytes=4)],
            dtypes=["bfloat16", "float16", "float32"], returns=["output", "output_lse"]),
        reference=Reference(path="reference.py", origin="written"),
        tolerances={"bfloat16": Tolerance(atol=1e-2, rtol=1.6e-2), "float16": Tolerance(atol=1e-3, rtol=2e-3),
                    "float32": Tolerance(atol=1e-5, rtol=1e-5)},
        shapes=[ShapeCase(dims={"T": 512, "H": 40, "D": 128}, tags=["paper"], source="fixture"),
                ShapeCase(dims={"T": 1, "H": 32, "D": 128}, tags=["decode", "edge"], source="fixture"),
                ShapeCase(dims={"T": 8192, "H": 32, "D": 128}, tags=["prefill"], source="fixture"),
                ShapeCase(dims={"T": 768, "H": 32, "D": 256}, tags=["paper"], source="fixture")],
    )
    write_manifest(op, m)
    return op


def make_h_gather(dst: Path, inputs: str | None = None) -> Path:
    """A Triton op whose ``index`` is generated by inputs.py (distinct slots of an S-row table); ``inputs``
    replaces inputs.py's text (to test a generator that breaks its contract)."""
    op = dst / "h_gather"
    shutil.copytree(HERE / "h_gather", op)
    if inputs is not None:
        (op / "inputs.py").write_text(inputs)
    m = Manifest(
        op_id="test.h_gather", short_name="h_gather", sglang_version="none", source_kind="triton",
        entry_point="tests:h_gather",
        files=_files(op, [("h_gather.py", "kernel"), ("reference.py", "reference"), ("inputs.py", "inputs")]),
        recipe=TritonRecipe(source="h_gather.py", wrapper="h_gather", kernels=["_h_gather_kernel"],
                            call=["table", "index", "out"]),
        signature=Signature(
            dims=[Dim(name="N", meaning="rows gathered"), Dim(name="S", meaning="table rows", min=8),
                  Dim(name="D", meaning="row width")],
            tensors=[TensorArg(name="table", role="input", shape=["S", "D"], dtype="{dtype}"),
                     TensorArg(name="index", role="input", shape=["N"], dtype="int32", align_bytes=4,
                               generated=True),
                     TensorArg(name="out", role="output", shape=["N", "D"], dtype="{dtype}")],
            dtypes=["float32", "bfloat16", "float16"],
            relations=["N <= S: index holds distinct rows of table"]),
        reference=Reference(path="reference.py", origin="written"),
        inputs=Inputs(path="inputs.py"),
        tolerances={"bfloat16": Tolerance(atol=0.0, rtol=0.0), "float16": Tolerance(atol=0.0, rtol=0.0),
                    "float32": Tolerance(atol=0.0, rtol=0.0)},
        shapes=[ShapeCase(dims={"N": 3, "S": 8, "D": 5}, tags=["test"], source="fixture"),
                ShapeCase(dims={"N": 8, "S": 8, "D": 16}, tags=["test"], source="fixture")],
    )
    write_manifest(op, m)
    return op


H_NORM_MAX_H = 64  # the h_norm original refuses wider rows; the manifest says SGLang serves them eagerly


def make_h_norm(dst: Path) -> Path:
    op = dst / "h_norm"
    shutil.copytree(HERE / "h_norm", op)
    call = ["input", "residual", "weight", "eps"]
    eager = Baseline(
        name="h_norm_eager", description="eager torch in the shape of RMSNorm.forward_native",
        when=f"H > {H_NORM_MAX_H}", recipe=TorchRecipe(source="served_eager.py", function="forward_native",
                                                      call=call),
        same_function=True, serves=[ServeRule(dims={"H": DimBound(min=H_NORM_MAX_H + 1)}, source="fixture")],
        returns=["input", "residual"])
    m = Manifest(
        op_id="test.h_norm", short_name="h_norm", sglang_version="none", source_kind="triton",
        entry_point="tests:h_norm",
        files=_files(op, [("h_norm.py", "kernel"), ("served_eager.py", "baseline_kernel"), ("reference.py", "reference")]),
        recipe=TritonRecipe(source="h_norm.py", wrapper="h_norm", kernels=[], call=call),
        signature=Signature(
            dims=[Dim(name="T", meaning="tokens"), Dim(name="H", meaning="hidden", multiple_of=8)],
            tensors=[TensorArg(name="input", role="inplace", shape=["T", "H"], dtype="{dtype}"),
                     TensorArg(name="residual", role="inplace", shape=["T", "H"], dtype="{dtype}"),
                     TensorArg(name="weight", role="input", shape=["H"], dtype="{dtype}")],
            scalars=[ScalarArg(name="eps", type="float", default=1e-6)],
            dtypes=["bfloat16", "float16"], returns=[]),
        reference=Reference(path="reference.py", origin="written"),
        tolerances={"bfloat16": Tolerance(atol=1.6e-2, rtol=1.6e-2), "float16": Tolerance(atol=2e-3, rtol=2e-3)},
        baselines=[eager],
        shapes=[ShapeCase(dims={"T": 3, "H": 16}, tags=["test"], source="fixture"),
                ShapeCase(dims={"T": 5, "H": 72}, tags=["test"], source="fixture: the original refuses it"),
                ShapeCase(dims={"T": 2, "H": 128}, tags=["test"], source="fixture: the original refuses it")],
    )
    write_manifest(op, m)
    return op
