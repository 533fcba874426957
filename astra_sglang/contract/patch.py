"""The on-disk contract of one patch folder: ``patches/<op>/<patch-id>/manifest.json`` next to its kernel.

A patch is installed into running SGLang servers, so the manifest states everything the plugin must prove
before one call is served by it: which files (pinned by SHA-256), which SGLang versions and GPU archs it was
validated on, which calls it covers (the guard), and why anyone should believe it (provenance, evidence).

What the kernel *is* lives in one place, the extracted op's manifest (pinned here by its SHA-256): the entry
point and call list, the signature, the tolerances it is checked with, and the call sites a patch may replace.
A patch only names its op, its source and which of the op's call sites it takes over.
Pydantic only: the plugin reads this inside every SGLang process without torch being imported for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from astra_sglang.contract.base import Model, drop_unset, read_versioned, sha256_file
from astra_sglang.contract.op import Manifest, hook_target
from astra_sglang.contract.repin import RePin
from astra_sglang.contract.result import EvalResult
from astra_sglang.errors import AstraError
from astra_sglang.platform_info import same_gpu

SCHEMA_VERSION = 2
MANIFEST_NAME = "manifest.json"

KernelKind = Literal["triton", "cuda_jit"]
ProvenanceKind = Literal["run", "scripted", "hand-written"]



class PatchFile(Model):
    path: str = Field(description="relative to the patch folder, POSIX separators")
    sha256: str
    role: Literal["kernel", "header", "evidence", "other"] = "kernel"


class PatchSource(Model):
    """The patch's kernel. How it is called comes from the op manifest: a Triton source defines the op's Triton
    wrapper (``recipe.wrapper``, or the entry point's name for a CUDA op) taking ``recipe.call`` (the signature's
    names for a CUDA op); a ``.cuh`` replaces the CUDA recipe's first source and exports ``recipe.entry``."""

    kind: KernelKind
    file: str = Field(description="relative path of the kernel source inside the patch folder")
    retune: bool | None = Field(default=None, description="True: ``file`` is a RetuneRecipe (retune.json), and the "
                                "kernel is SGLang's own source of the op, read from the installed SGLang at load, "
                                "with its launch configs set per call from the recipe's rows (no SGLang code here)")


class RetuneRow(Model):
    """One bucket of a retune: the call dims it stands for and the launch config its calls get."""

    dims: dict[str, int] = Field(description="the dims a call is matched on (nearest by log distance)")
    config: dict[str, int] = Field(description="launch parameter -> value, as the sweep names them")
    shapes: list[dict[str, int]] = Field(description="the timed shapes whose sweep chose this config")
    geomean_speedup: float = Field(description="this config over SGLang's own at those shapes, in the sweep")


class RetuneRecipe(Model):
    """``retune.json``: SGLang's kernel with launch configs from a sweep baseline (``astra-sglang tune``), per bucket
    of the dims a call shows. Numbers only: the source it applies to is the installed SGLang's, pinned through the
    op manifest by SHA-256."""

    schema_version: int = 1
    op_id: str
    sglang_version: str
    swept_on: str = Field(description="the device the sweep measured, as the harness names it")
    parameters: dict[str, list[int]]
    rows: list[RetuneRow]


class DimRange(Model):
    min: int = 1
    max: int | None = None
    multiple_of: int = 1

    def accepts(self, value: int) -> bool:
        return value >= self.min and (self.max is None or value <= self.max) and value % self.multiple_of == 0


def box_takes(box: dict[str, DimRange], dims: dict[str, int]) -> bool:
    """Whether ``dims`` name every dim of one guard box, each inside its range."""
    return all(name in dims and r.accepts(dims[name]) for name, r in box.items())


class GuardSpec(Model):
    """The calls the patch was validated on; every other call goes to SGLang's original."""

    dtypes: list[str] = Field(description="torch dtype names, e.g. ['bfloat16', 'float16']")
    dims: dict[str, DimRange] = Field(description="per symbolic dim of the op adapter (T, H, ...)")
    align_bytes: int = Field(default=16, description="every tensor's data pointer must be a multiple of this")
    contiguous: bool = True
    regions: list[dict[str, DimRange]] = Field(
        default_factory=list,
        description="where the patch measured faster than what SGLang serves: a call's dims must also fall in one "
                    "of these boxes (empty: ``dims`` alone). One box cannot hold 'every H at T <= 256, and T = 512 "
                    "only at H = 14336'; `patches guard` derives them from per-shape measurements")

    gpu_regions: dict[str, list[dict[str, DimRange]]] = Field(
        default_factory=dict,
        description="GPU model ('NVIDIA H200') -> the boxes where the patch won ON THAT GPU, when it was measured on "
                    "more than one: on a GPU named here these replace ``regions`` (an empty list: it serves nothing "
                    "there), and ``regions`` is then their union (what may serve somewhere: the first-call check "
                    "covers it). One set of boxes for every GPU served a shape measured on the H100 only on the "
                    "H200 too, and dropped a shape on both where one of them lost it")

    @model_serializer(mode="wrap")
    def _without_empty_gpu_regions(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Written only when measured on several GPUs, so guards written before it keep their bytes."""
        return drop_unset(handler(self), "gpu_regions")

    def accepts_dims(self, dims: dict[str, int]) -> bool:
        """The guard's dims rule alone (dtype, alignment and layout are the runtime's): a check-shape filter."""
        return box_takes(self.dims, dims) and (not self.regions or any(box_takes(box, dims) for box in self.regions))

    def region_of(self, dims: dict[str, int]) -> dict[str, DimRange] | None:
        """The first of its boxes that takes ``dims`` (its ``dims`` where it has no regions); None: none does."""
        return next((box for box in (self.regions or [self.dims]) if box_takes(box, dims)), None)

    def on_gpu(self, gpu: str | None) -> GuardSpec | None:
        """The guard as it serves on the GPU model ``gpu``: its own boxes where it was measured per GPU; None where
        it won nothing on that GPU; itself where no GPU is named or none of ``gpu_regions`` is this one."""
        boxes = next((b for g, b in self.gpu_regions.items() if gpu and same_gpu(g, gpu)), None)
        if boxes is None:
            return self if not self.gpu_regions else self.model_copy(update={"gpu_regions": {}})
        return self.model_copy(update={"regions": boxes, "gpu_regions": {}}) if boxes else None

    def to_measure_on(self, gpu: str | None) -> GuardSpec:
        """The guard for measuring the patch again on ``gpu`` (``patches verify``, the device check): where it won
        nothing there (``on_gpu`` None), its union, as for a GPU new to it; otherwise itself. An H200 record
        without the S 512 twins left the rewrite nothing on the H200, and the plugin refuses it there; the record
        that adds the twins has to check it on the H200 all the same."""
        if self.on_gpu(gpu) is not None:
            return self
        return self.model_copy(update={"gpu_regions": {g: b for g, b in self.gpu_regions.items()
                                                       if not (gpu and same_gpu(g, gpu))}})

    def takes(self, dims: dict[str, int], dtype: str, gpu: str | None) -> bool:
        """Whether the guard serves a call of these dims and dtype on the GPU model ``gpu`` (its boxes there)."""
        here = self.on_gpu(gpu)
        return here is not None and dtype in here.dtypes and here.accepts_dims(dims)


class GuardRow(Model):
    """One measured shape behind a derived guard: the patch against what SGLang serves there."""

    dims: dict[str, int]
    dtype: str
    served_by: str | None = None
    served_us: float | None = None
    candidate_us: float | None = None
    speedup: float | None = Field(default=None, description="served_us / candidate_us (else vs the original)")
    spread_pct: float = 0.0
    wins: bool = Field(description="faster beyond the spread: speedup - 1 > spread_pct / 100, not suspect")
    served: bool = Field(default=False, description="inside the derived guard: the patch serves this shape")
    gpu: str | None = Field(default=None, description="the GPU model it was timed on ('NVIDIA H200'); wins count "
                            "per GPU (``GuardSpec.gpu_regions``)")

    @model_serializer(mode="wrap")
    def _without_unset_gpu(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return drop_unset(handler(self), "gpu")


class ValidatedOn(Model):
    sglang_versions: list[str]
    archs: list[str] = Field(description="'sm_90' style (torch's compute capability), or 'cpu-interpret'")
    gpus: list[str] = Field(default_factory=list, description="the GPU models its guard was measured on ('NVIDIA "
                            "H200'): one arch holds GPUs of other bandwidths (sm_90: H100 and H200), where the "
                            "shapes it wins on differ; empty: not recorded (any GPU of the archs)")


class Provenance(Model):
    kind: ProvenanceKind
    run: str | None = Field(default=None, description="runs/<op>/<run-id> the patch came from")
    model: str | None = None
    rounds: int | None = None
    label: str | None = Field(default=None, description="the run's label, e.g. 'MODEL RUN: <model> answering ...'")
    mode: str | None = Field(default=None, description="multi-agent / single-agent, with K candidates a round")
    candidate_sha256: str | None = Field(default=None, description="the winner's source as the run shipped it")
    author: str | None = None
    note: str = ""


class Evidence(Model):
    """Why the patch is believed correct and faster: the harness's verdicts, kept verbatim."""

    baseline: str = Field(default="SGLang's serving path for this op",
                          description="what the times were measured against")
    results: list[EvalResult] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    guard_table: list[GuardRow] = Field(
        default_factory=list, description="the per-shape measurements the guard was derived from (`patches guard`)")

    def speedups(self) -> list[tuple[dict[str, int], str, float | None]]:
        rows: list[tuple[dict[str, int], str, float | None]] = []
        for r in self.results:
            if r.timing:
                rows.extend((s.dims, s.dtype, s.speedup) for s in r.timing.shapes)
        return rows


class PatchManifest(Model):
    schema_version: int = SCHEMA_VERSION
    patch_id: str
    op: str = Field(description="the extracted op's short name (its folder under extracted/)")
    op_manifest_sha256: str = Field(description="SHA-256 of the op's manifest.json the patch was validated against")
    description: str = ""
    source: PatchSource
    targets: list[str] = Field(description="HookRegistry REPLACE targets, each a `target` of the op manifest's "
                               "call_sites that binds the op's own function")
    validated_on: ValidatedOn
    guard: GuardSpec
    check_shapes: list[dict[str, int]] = Field(
        description="covered dims the plugin checks the kernel against the original on before serving")
    files: list[PatchFile]
    provenance: Provenance
    evidence: Evidence = Field(default_factory=Evidence)
    in_all: bool = Field(True, description="enabled by ASTRA_SGLANG_PATCHES=all; False for a test vehicle, which "
                         "serves only where its id is named")
    repinned: list[RePin] = Field(default_factory=list, description="moves of op_manifest_sha256 since validation, "
                                  "each proven to change nothing but the op id (contract/repin.py)")
    guard_in_front: dict[str, GuardSpec] = Field(
        default_factory=dict, description="patch id of a retune of this op -> the guard this patch serves when it "
        "stands in front of that retune (`patches guard ID --behind RETUNE`): where it beat the retune too, not only "
        "SGLang's original; ``guard`` when it stands alone")

    @model_serializer(mode="wrap")
    def _without_empty_repinned(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Written only when there is one, so patch manifests without a re-pin keep their bytes."""
        return drop_unset(handler(self), "repinned", "guard_in_front")


class PatchManifestError(AstraError, ValueError):
    """A patch folder that cannot be read: one clear reason."""



def load_patch_manifest(patch_dir: Path) -> PatchManifest:
    path = Path(patch_dir) / MANIFEST_NAME
    if not path.is_file():
        raise PatchManifestError(f"{path} is missing")
    return read_versioned(path, PatchManifest, SCHEMA_VERSION, PatchManifestError, "patch manifest")


def write_patch_manifest(patch_dir: Path, manifest: PatchManifest) -> Path:
    path = Path(patch_dir) / MANIFEST_NAME
    path.write_text(manifest.model_dump_json(indent=2, exclude_none=True) + "\n")
    return path


def file_problem(patch_dir: Path, manifest: PatchManifest) -> str | None:
    """The first missing or altered file, or None when every listed file matches its SHA-256.

    The kernel source must be listed: a manifest that does not pin what it runs proves nothing.
    """
    listed = {f.path for f in manifest.files}
    if manifest.source.file not in listed:
        return f"kernel source {manifest.source.file} is not pinned in files[]"
    for f in manifest.files:
        p = Path(patch_dir) / f.path
        if not p.is_file():
            return f"missing file {f.path}"
        if sha256_file(p) != f.sha256:
            return f"hash mismatch for {f.path} (file altered after it was validated)"
    return None


def pin_files(patch_dir: Path, roles: dict[str, str] | None = None) -> list[PatchFile]:
    """Hash every file in the folder except the manifest (roles: path -> role; default 'kernel')."""
    patch_dir = Path(patch_dir)
    out = []
    for p in sorted(patch_dir.rglob("*")):
        rel = p.relative_to(patch_dir).as_posix()
        if not p.is_file() or rel == MANIFEST_NAME or "__pycache__" in p.parts:
            continue
        role = (roles or {}).get(rel) or ("evidence" if p.suffix == ".json" else "kernel")
        out.append(PatchFile(path=rel, sha256=sha256_file(p), role=role))
    return out


def served_targets(op: Manifest) -> list[str]:
    """Where a patch must hook to stand in for what SGLang serves: the call sites of a same-function baseline
    that serves every shape on the default path (fused_add_rmsnorm: ``sgl_kernel.fused_add_rmsnorm``, FlashInfer's
    kernel; the JIT entry point is reached only with ``cast_x_before_out_mul=True``, another function), else the
    entry point as SGLang binds it. The harness times candidates against that same served kernel, so the
    patch replaces the kernel its evidence beat."""
    always = {b.name for b in op.baselines
              if b.same_function and b.serves and any(not (r.dims or r.dtypes or r.scalars) for r in b.serves)}
    sites = sorted({cs.target for cs in op.call_sites if cs.binds in always and cs.same_function and cs.target})
    return sites or [hook_target(op.entry_point)]


def target_problem(op: Manifest, targets: list[str]) -> str | None:
    """Why these targets cannot be patched with this op's kernel, or None.

    A target must be a call site the extractor found for the op, and bind the op's own function: standing in
    for a different function (FlashInfer's base-2 merge_state beside SGLang's base-e one) changes results.
    """
    if not targets:
        return "no targets"
    sites = [cs for cs in op.call_sites if cs.target]
    for t in targets:
        match = [cs for cs in sites if cs.target == t]
        if not match:
            known = sorted({cs.target for cs in sites if cs.same_function and cs.target})
            return f"target {t} is not among {op.short_name}'s call sites (known: {', '.join(known) or 'none'})"
        if not all(cs.same_function for cs in match):
            return f"target {t} binds {match[0].binds}, which is not the same function as {op.short_name}"
    return None
