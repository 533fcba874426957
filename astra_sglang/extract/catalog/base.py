"""What an op's catalog entry states: the knowledge about one kernel that cannot be read off SGLang's code.

Everything derivable (sources, header closure, hashes, template arguments, compile flags, call sites) is
captured generically by the extractor; an entry only adds the semantics (signature, reference, tolerances),
how the entry export is called, which shapes matter, and where the serving path really goes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from astra_sglang.contract.op import (
    Baseline,
    CallSite,
    ContractProvenance,
    KernelFinding,
    ServeRule,
    ShapeCase,
    Signature,
    Tolerance,
    canonical_op_id,
)
from astra_sglang.extract.catalog.source_text import FileText

# Justification of the default tolerances (relative, per dtype). A kernel and a float32 reference that
# round at different points differ by about one unit in the last place of the stored dtype:
# bf16 has 8 significant bits (ulp 2^-7 = 7.8e-3 relative, so 1.6e-2 = 2 ulp), fp16 11 bits
# (ulp 2^-10 = 9.8e-4, so 2e-3 = 2 ulp), fp32 24 bits (1e-5 leaves room for fast-math exp/rsqrt).
# atol covers values near zero where relative error is meaningless.
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "bfloat16": Tolerance(atol=1.6e-2, rtol=1.6e-2),
    "float16": Tolerance(atol=2e-3, rtol=2e-3),
    "float32": Tolerance(atol=1e-5, rtol=1e-5),
}


@dataclass(frozen=True)
class FlashInferBaseline:
    """A FlashInfer kernel SGLang serves with, rebuilt from the installed flashinfer-python's headers."""

    name: str
    header: str  # path under flashinfer/data/include, e.g. 'flashinfer/norm.cuh'
    glue: str  # file name of our glue .cuh under astra_sglang/extract/glue/
    template_args: dict[str, str]
    exports: list[tuple[str, str]]  # (export name, C++ symbol with '{targs}')
    entry: str
    call: list[str]
    description: str
    when: str
    same_function: bool
    note: str = ""
    serves: tuple[ServeRule, ...] = ()  # Baseline.serves: the shapes/flags SGLang dispatches here


@dataclass(frozen=True)
class CatalogEntry:
    short_name: str
    op_id: str  # 'family.name': SGLang's registry op id, else op_id_of(entry_point) (contract/op.py: one rule)
    entry_point: str  # 'module:attr' of the SGLang function the kernel is called through
    kind: Literal["cuda_jit", "triton"]
    signature: Signature
    reference: FileText  # reference.py (ours): def reference(**args) -> dict[str, Tensor]
    shapes: Callable[[], list[ShapeCase]]
    call: list[str]
    # cuda_jit: SGLang's module builder and the arguments that select each dtype's build
    builder: str | None = None  # 'module:function'
    builder_args: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # dtype -> positional args
    builder_kwargs: dict[str, Any] = field(default_factory=dict)
    entry_export: str | None = None
    # triton: the wrapper that launches the kernels
    wrapper: str | None = None  # 'module:function'
    tolerances: dict[str, Tolerance] = field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    forward_native: str | None = None  # SGLang's forward_native target, if any
    aliases: tuple[str, ...] = ()
    callsite_modules: tuple[str, ...] = ()  # modules to import before scanning sys.modules
    serving_sites: dict[str, str] = field(default_factory=dict)  # 'module:attr' -> note
    # bindings the sys.modules scan cannot see (CUDA-only imports read from source, library kernels)
    extra_sites: list[CallSite] = field(default_factory=list)
    baselines: list[Baseline] = field(default_factory=list)
    flashinfer_baselines: list[FlashInferBaseline] = field(default_factory=list)
    trace_dims: Callable[[list[tuple[str, list[int]]]], dict[str, int] | None] | None = None
    notes: list[str] = field(default_factory=list)
    # inputs.py (ours) when the signature has generated tensors: make_inputs(dims, dtype, gen, device)
    inputs: FileText | None = None
    inputs_scalars: bool = False  # inputs.py also defines scalars(dims, dtype)
    provenance: ContractProvenance = field(default_factory=ContractProvenance)
    adapter: FileText | None = None  # adapter.py (ours), defining call(wrapper, *call): see TritonRecipe
    tuned_kernels: tuple[str, ...] = ()  # triton: the kernels `tune` sweeps (default: all): see TritonRecipe.tuned
    # triton, a wrapper taking its launch config as a dict: that argument's name and the keys/values `tune` sweeps
    # (TritonRecipe.config_space)
    config_arg: str | None = None
    config_space: dict[str, list[int]] | None = None
    findings: list[KernelFinding] = field(default_factory=list)  # SGLang kernel bugs the reference does not copy

    def __post_init__(self) -> None:
        if ":" in self.op_id or self.op_id.startswith("sglang."):
            raise ValueError(f"{self.short_name}: op id {self.op_id!r} is not 'family.name' (an op SGLang does not "
                             f"register takes op_id_of(entry_point), here {canonical_op_id(self.op_id)!r})")


def exact_tolerances(dtypes: list[str]) -> dict[str, Tolerance]:
    """Index and metadata ops copy or count integers: any difference is a wrong index, so tolerance 0."""
    return {d: Tolerance(atol=0.0, rtol=0.0) for d in dtypes}
