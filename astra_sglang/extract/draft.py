"""A drafted contract: the catalog entry's data as a model writes it, and the op it is drafted for.

A model (the Contract agent, ``agents/contract_agent.py``) answers with a ``DraftContract``; it becomes a
``CatalogEntry`` so the same extractor writes the op folder as for a hand-written entry. A draft is only a
proposal: ``extract OP --draft`` accepts it once the original kernel agrees with it (``agents/drafting.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from astra_sglang.contract.base import Model
from astra_sglang.contract.op import ContractProvenance, ShapeCase, Signature, Tolerance
from astra_sglang.errors import AstraError
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.catalog.source_text import FileText


class DraftContract(Model):
    """What extraction cannot read off SGLang's code, for one op, as JSON."""

    short_name: str = Field(description="the op folder's name: lowercase letters, digits and '_'")
    signature: Signature
    call: list[str] = Field(description="arguments of the wrapper (Triton) or export (CUDA) call, in order: "
                            "signature names or Python literals")
    wrapper: str | None = Field(default=None, description="Triton: the launch wrapper's function name in the "
                                "op's source module; for a kernel SGLang launches directly (kernel[grid](...) at its "
                                "call site, no Python wrapper), the @triton.jit kernel's own name, with 'adapter'")
    adapter: str | None = Field(default=None, description="Triton, only for a kernel without a launch wrapper: the "
                                "text of adapter.py defining call(kernel, *call), which launches the kernel as "
                                "SGLang's call site does (grid and constexprs from the arguments), e.g. "
                                "def call(kernel, x, y, n): kernel[(n,)](x, y, n, BLOCK=128)")
    builder: str | None = Field(default=None, description="CUDA JIT: SGLang's module builder, 'module:function'")
    builder_args: dict[str, list[Any]] = Field(
        default_factory=dict, description="CUDA JIT: dtype name -> positional arguments of the builder")
    builder_kwargs: dict[str, Any] = Field(default_factory=dict, description="CUDA JIT: builder keyword arguments")
    entry_export: str | None = Field(default=None, description="CUDA JIT: the export the op calls")
    reference: str = Field(description="the text of reference.py: def reference(**args) -> dict[str, Tensor] "
                           "with every output and in-place tensor, plain torch in float32/float64")
    forward_native: str | None = Field(default=None, description="SGLang's forward_native target it restates")
    inputs: str | None = Field(default=None, description="the text of inputs.py: make_inputs(dims, dtype, gen, "
                               "device) -> {name: tensor} for every generated tensor")
    inputs_scalars: bool = Field(default=False, description="inputs.py also defines scalars(dims, dtype)")
    shapes: list[ShapeCase]
    tolerances: dict[str, Tolerance] = Field(description="per dtype name; every dtype of the signature")
    serving_sites: dict[str, str] = Field(default_factory=dict, description="'module:function' of a serving call "
                                          "site -> what SGLang passes there")
    notes: list[str] = Field(default_factory=list)


@dataclass(frozen=True)
class DraftTarget:
    """The op a contract is drafted for, as the installed SGLang has it."""

    op_id: str
    entry_point: str  # 'module:attr' the kernel is called through
    kind: Literal["cuda_jit", "triton"]
    module: str  # Triton: the module with the @triton.jit kernels; CUDA JIT: the module that load_jit's
    sources: tuple[str, ...]  # Triton: path in the sglang package; CUDA JIT: paths under kernels/jit/csrc


def _module_of(rel_path: str) -> str:
    return "sglang." + rel_path.removesuffix(".py").replace("/", ".")


def draft_target(name: str) -> DraftTarget:
    """The op ``name`` names, if a contract can be drafted for it; otherwise one line saying why not."""
    from sglang.kernels.registry import registry

    from astra_sglang.extract import catalog
    from astra_sglang.extract.discovery import list_ops, resolve

    info = resolve(name, list_ops())
    entry = catalog.find(info.op_id)
    if entry is not None:
        raise AstraError(f"{info.op_id} has a hand-written contract: `astra-sglang extract {entry.short_name}` "
                         "writes it (--draft is for ops without a catalog entry)")
    if info.source_kind == "compiled_only":
        raise AstraError(f"{info.op_id} is compiled only (the sgl_kernel wheel): the installed SGLang has no source "
                         "to draft a contract from")
    if info.source_kind not in ("triton", "cuda_jit") or not info.sources:
        raise AstraError(f"{info.op_id} has no kernel source to draft a contract from: {info.reason}")
    if info.reason and "no catalog entry" not in info.reason:
        raise AstraError(f"{info.op_id} cannot be drafted: {info.reason}")
    backend = "triton" if info.source_kind == "triton" else "jit"
    targets = [s.target for s in registry.all_specs() if s.op == info.op_id and s.backend.value == backend]
    entry_point = targets[0] if targets else (info.entry_point or info.op_id)
    module = _module_of(info.sources[0]) if info.source_kind == "triton" else entry_point.partition(":")[0]
    return DraftTarget(op_id=info.op_id, entry_point=entry_point, kind=info.source_kind,  # type: ignore[arg-type]
                       module=module, sources=tuple(info.sources))


_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


def to_entry(draft: DraftContract, target: DraftTarget, provenance: ContractProvenance) -> CatalogEntry:
    """The draft as a catalog entry; a draft that names the wrong kind of entry is refused in one line."""
    if not _NAME_RE.match(draft.short_name):
        raise AstraError(f"short_name {draft.short_name!r} is not a folder name (lowercase letters, digits, '_')")
    shapes = list(draft.shapes)
    common: dict[str, Any] = dict(
        short_name=draft.short_name, op_id=target.op_id, entry_point=target.entry_point, kind=target.kind,
        signature=draft.signature, reference=FileText.verbatim(draft.reference), shapes=lambda: list(shapes),
        call=list(draft.call), tolerances=dict(draft.tolerances), forward_native=draft.forward_native,
        serving_sites=dict(draft.serving_sites),
        inputs=FileText.verbatim(draft.inputs) if draft.inputs is not None else None,
        # the call-site scan imports the callers' modules; what the draft says each passes stays in the notes
        callsite_modules=tuple(sorted({m for m in (s.partition(":")[0] for s in draft.serving_sites)
                                       if m.startswith("sglang.")})),
        notes=[*draft.notes, *(f"serving call site {site}: {note}" for site, note in draft.serving_sites.items())],
        inputs_scalars=draft.inputs_scalars, provenance=provenance)
    if target.kind == "triton":
        if not draft.wrapper:
            raise AstraError("a Triton op's draft needs 'wrapper' (the launch wrapper's function name; for a kernel "
                             "SGLang launches directly, the kernel's name and 'adapter' launching it)")
        return CatalogEntry(wrapper=f"{target.module}:{draft.wrapper.rpartition(':')[2]}",
                            adapter=FileText.verbatim(draft.adapter) if draft.adapter else None,
                            **common)
    if not draft.builder or not draft.entry_export or not draft.builder_args:
        raise AstraError("a CUDA JIT op's draft needs 'builder', 'builder_args' (per dtype) and 'entry_export'")
    return CatalogEntry(builder=draft.builder, entry_export=draft.entry_export,
                        builder_args={d: tuple(a) for d, a in draft.builder_args.items()},
                        builder_kwargs=dict(draft.builder_kwargs), **common)
