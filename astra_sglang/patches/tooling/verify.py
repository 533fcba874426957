"""``patches verify``: rebuild a patch and re-check it against the installed SGLang's original on this device.

Two independent checks, because each covers what the other cannot: the plugin's own activation (the exact
code path a server runs: guard, adapter, loader, check against SGLang's function resolved from the call
site), and the harness (full suite with held-out shapes, timing against the extracted original) whenever the
patch has the same form as the extracted op's source (a .cuh for a cuda_jit op, a Triton .py for a Triton op).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from astra_sglang.contract.base import sha256_file
from astra_sglang.contract.op import load_manifest
from astra_sglang.contract.patch import CPU_INTERPRET_ARCH, MANIFEST_NAME, PatchManifest, file_problem
from astra_sglang.contract.result import EvalResult
from astra_sglang.errors import AstraError
from astra_sglang.patches import status
from astra_sglang.patches.registry import (
    PatchEntry,
    VerifyRecord,
    device_problem,
    installed_sglang_version,
    op_folder,
)
from astra_sglang.patches.tooling.state import now, record_verify


@dataclass
class VerifyOutcome:
    patch_id: str
    ok: bool
    arch: str | None
    detail: str
    harness: EvalResult | None = None
    notes: list[str] = field(default_factory=list)
    op_manifest_sha256: str = ""  # the op manifest the check ran against: what `--record` pins
    here: bool = True  # False: this host cannot run the check at all (no verdict on the patch)


ELSEWHERE = ("on a GPU host: `astra-sglang patches verify --record {pid}` where SGLang is installed, or "
             "`pytest tests/test_acceptance_gpu.py -k {pid}` where it is not")


def unverifiable_here(m: PatchManifest, arch: str | None) -> str | None:
    """Why no check of this patch can run on this host, or None. Verify compares with the installed SGLang's
    own function, so both the patch and SGLang's original must run here: on a host without a GPU only a Triton
    patch of a Triton op qualifies, and only under TRITON_INTERPRET=1."""
    if arch is not None and arch != CPU_INTERPRET_ARCH:
        return None
    try:
        op_kind = load_manifest(op_folder(m.op)).recipe.kind
    except AstraError as e:
        return f"cannot verify here: {e}"
    where = ELSEWHERE.format(pid=m.patch_id)
    if m.source.kind != "triton":
        why = f"a {m.source.kind} patch needs a GPU and this host has none"
    elif op_kind != "triton":
        why = f"SGLang's original {m.op} is a {op_kind} kernel, which needs a GPU, and this host has none"
    elif arch is None:
        return (f"cannot verify here: no GPU; a Triton patch of a Triton op can be checked on CPU with "
                f"TRITON_INTERPRET=1, or {where}")
    else:
        return None
    return f"cannot verify here: {why}; verify it {where}"


def current_op_sha256(m: PatchManifest) -> str:
    """The SHA-256 of the op manifest as it is now (a re-extraction changes it; verifying re-pins it)."""
    path = op_folder(m.op) / MANIFEST_NAME
    return sha256_file(path) if path.is_file() else m.op_manifest_sha256


def probe_arch() -> str | None:
    """This host's device as the registry names it: 'sm_90', 'cpu-interpret', or None."""
    import os

    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}"
    except Exception:
        return None
    return "cpu-interpret" if os.environ.get("TRITON_INTERPRET") == "1" else None


def verify_entry(entry: PatchEntry, *, shapes: str = "all", harness: bool = True, record: bool = False) -> VerifyOutcome:
    """Check the patch on this host; only ``record`` writes the outcome (pass or fail) to the state file."""
    from astra_sglang.patches.install import resolve_target
    from astra_sglang.patches.runtime import PatchRuntime

    version = installed_sglang_version()
    arch = probe_arch()
    m = entry.manifest
    problem = (entry.error or "unreadable manifest") if m is None else file_problem(entry.path, m)
    if problem is None and version is None:
        problem = "SGLang is not installed: verify checks against the installed SGLang's original"
    if problem or m is None:
        return VerifyOutcome(entry.patch_id, False, arch, problem or "unreadable manifest")
    elsewhere = unverifiable_here(m, arch)
    if elsewhere:
        return VerifyOutcome(m.patch_id, False, arch, elsewhere, here=False)
    # verifying is how a patch becomes validated on a new SGLang, device or re-extracted op: none may stop the check
    patched = m.model_copy(update={"validated_on": m.validated_on.model_copy(update={
        "sglang_versions": list(m.validated_on.sglang_versions) + [version],
        "archs": list(m.validated_on.archs) + ([arch] if arch else [])}),
        "op_manifest_sha256": current_op_sha256(m)})
    problem = device_problem(patched, arch)
    if problem:
        return VerifyOutcome(entry.patch_id, False, arch, problem)
    status.reset(m.patch_id)
    try:
        from astra_sglang.extract.sglang_env import install_cpu_shims

        install_cpu_shims()
        original = resolve_target(m.targets[0])
    except Exception as e:
        return VerifyOutcome(m.patch_id, False, arch, f"cannot resolve {m.targets[0]}: {e}")
    rt = PatchRuntime(entry.path, patched)
    rt.hook_for(original, m.targets[0])
    ok = rt.activate("cuda" if arch != "cpu-interpret" else "cpu", original)
    st = status.statuses()[m.patch_id]
    out = VerifyOutcome(m.patch_id, ok, arch, st.reason, op_manifest_sha256=patched.op_manifest_sha256)
    if ok and harness:
        out.harness, note = _harness(entry, shapes)
        if note:
            out.notes.append(note)
        if out.harness is not None and not out.harness.ok:
            out.ok = False
            out.detail = f"harness: {out.harness.error or 'incorrect'}"
    if record and version and arch:
        record_verify(m.patch_id, VerifyRecord(
            ok=out.ok, sglang_version=version, arch=arch, manifest_sha256=sha256_file(entry.path / MANIFEST_NAME),
            when=now(), geomean_speedup=out.harness.geomean_speedup if out.harness else None, detail=out.detail))
    return out


def _harness(entry: PatchEntry, shapes: str) -> tuple[EvalResult | None, str | None]:
    from astra_sglang.patches.kernels import extracted_op_dir

    m = entry.manifest
    assert m is not None
    op_dir = extracted_op_dir(m)
    try:
        op = load_manifest(op_dir)
    except Exception as e:
        return None, f"harness skipped: {e}"
    if op.recipe.kind != m.source.kind:
        return None, (f"harness skipped: a {m.source.kind} patch for a {op.recipe.kind} op is not a harness candidate; "
                      f"`pytest tests/test_acceptance_gpu.py -k {m.patch_id}` times it on the GPU host")
    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.harness.evaluate import evaluate

    cfg: Any = EvalConfig(shapes=shapes, include_heldout=True)  # type: ignore[arg-type]
    return evaluate(op_dir, entry.path / m.source.file, cfg), None
