"""``patches verify``: rebuild a patch and re-check it against the installed SGLang's original on this device.

Two independent checks, because each covers what the other cannot: the plugin's own activation (the exact
code path a server runs: guard, adapter, loader, check against SGLang's function resolved from the call
site), and the harness (full suite with held-out shapes, timing against the extracted original) whenever the
patch has the same form as the extracted op's source (a .cuh for a cuda_jit op, a Triton .py for a Triton op).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from astra_sglang import platform_info
from astra_sglang.contract.base import sha256_file
from astra_sglang.contract.op import Manifest, load_manifest, manifest_sha256
from astra_sglang.contract.patch import MANIFEST_NAME, PatchManifest, file_problem
from astra_sglang.contract.result import EvalResult, ShapeTiming
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


def _interpreter_limit(op: Any) -> tuple[tuple[str, ...] | None, str] | None:
    """What the Triton interpreter computes wrongly for this op (contract validation's list): imported here, on
    the verify path only, so that serving never loads the harness."""
    from astra_sglang.harness.parent.contract_validation import interpreter_limit

    return interpreter_limit(op, "cpu")


def unverifiable_here(m: PatchManifest, arch: str | None) -> str | None:
    """Why no check of this patch can run on this host, or None. Verify compares with the installed SGLang's
    own function, so both the patch and SGLang's original must run here: on a host without a GPU only a Triton
    patch of a Triton op qualifies, and only under TRITON_INTERPRET=1."""
    if arch is not None and arch != platform_info.CPU_INTERPRET_ARCH:
        return None
    try:
        op = load_manifest(op_folder(m.op))
    except AstraError as e:
        return f"cannot verify here: {e}"
    where = ELSEWHERE.format(pid=m.patch_id)
    limit = _interpreter_limit(op)
    if m.source.kind != "triton":
        why = f"a {m.source.kind} patch needs a GPU and this host has none"
    elif op.recipe.kind != "triton":
        why = f"SGLang's original {m.op} is a {op.recipe.kind} kernel, which needs a GPU, and this host has none"
    elif arch is None:
        return (f"cannot verify here: no GPU; a Triton patch of a Triton op can be checked on CPU with "
                f"TRITON_INTERPRET=1, or {where}")
    elif limit is not None and (limit[0] is None or set(m.guard.dtypes) <= set(limit[0])):
        # the interpreter computes these dtypes wrongly for this op: a mismatch there would be its, not the
        # patch's (the decode-attention patch, bf16 only, "FAILED" under TRITON_INTERPRET=1, 2026-12-05)
        dtypes = "this op" if limit[0] is None else "/".join(m.guard.dtypes)
        why = f"the Triton interpreter cannot check {dtypes} here: {m.op} {limit[1]}"
    else:
        return None
    return f"cannot verify here: {why}; verify it {where}"


def current_op_sha256(m: PatchManifest) -> str:
    """The SHA-256 of the op manifest as it is now (a re-extraction changes it; verifying re-pins it)."""
    folder = op_folder(m.op)
    return manifest_sha256(folder) if (folder / MANIFEST_NAME).is_file() else m.op_manifest_sha256


def to_measure_here(m: PatchManifest, arch: str | None, gpu: str | None, version: str | None = None) -> PatchManifest:
    """``m`` as this host measures it (``verify``, the device check): validated on this SGLang ``version`` (None: as
    it is), arch and GPU model, pinned to the op as it is now, its guard the one to measure on this GPU
    (``GuardSpec.to_measure_on``). Verifying is how a patch becomes validated on a new SGLang, device or
    re-extracted op, so none may stop the check; a patch measured on the H200 only was refused on the H100 by its
    GPU gate, and the device check reported that refusal as a failure (2026-12-05)."""
    vo = m.validated_on
    return m.model_copy(update={"validated_on": vo.model_copy(update={
        "sglang_versions": list(vo.sglang_versions) + ([version] if version else []),
        "archs": list(vo.archs) + ([arch] if arch else []),
        "gpus": list(vo.gpus) + ([gpu] if gpu and vo.gpus else [])}),
        "op_manifest_sha256": current_op_sha256(m), "guard": m.guard.to_measure_on(gpu)})


INTERPRETER_CHECK = ("Triton interpreter: a correctness-only check on small shapes below the guard's minimums "
                     "({shapes}: one call at a served shape takes minutes there) and the harness on the test "
                     "shapes; nothing timed, nothing recorded; verify on a GPU host for the real check")


def interpreter_check(m: PatchManifest) -> PatchManifest:
    """The manifest a Triton-interpreter run checks: the check shapes shrunk as the harness's CPU test shapes
    are (every guarded dim 1, 5 and 3 in turn, raised to its multiple_of) and the guard's minimums lowered to
    admit them, so the same kernel, adapter and comparison run in seconds (25 minutes at the served shapes).
    This checks the kernel's arithmetic, not its served shapes: the caller labels it so and records nothing."""
    base = m.check_shapes[0] if m.check_shapes else {}
    shapes: list[dict[str, int]] = []
    for free in (1, 5, 3):
        dims = dict(base)
        for name, r in m.guard.dims.items():
            dims[name] = -(-free // r.multiple_of) * r.multiple_of
        if dims not in shapes:
            shapes.append(dims)
    guard = {name: r.model_copy(update={"min": min([r.min] + [s[name] for s in shapes])})
             for name, r in m.guard.dims.items()}
    # the measured regions hold served shapes, which these are not on purpose: only the dims ranges stay
    return m.model_copy(update={"check_shapes": shapes,
                                "guard": m.guard.model_copy(update={"dims": guard, "regions": []})})


def _announced(original: Any, say: Callable[[str], None]) -> Any:
    """``original`` saying each call (one per check case): an interpreter check is slow, never silent."""
    calls = 0

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        t = next((a for a in args if hasattr(a, "shape") and hasattr(a, "dtype")), None)
        what = f" on {tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}" if t is not None else ""
        say(f"  check case {calls}: the patch and SGLang's original{what}")
        return original(*args, **kwargs)

    return call


def verify_entry(entry: PatchEntry, *, shapes: str = "all", harness: bool = True, record: bool = False,
                 progress: Callable[[str], None] | None = None, twins_only: bool = False) -> VerifyOutcome:
    """Check the patch on this host; only ``record`` writes the outcome (pass or fail) to the state file.
    ``progress`` gets a line per step and per check case. Under the Triton interpreter the check runs on
    small shapes (``interpreter_check``) and the harness on the test shapes, labelled, and is not recorded.
    ``twins_only``: the harness times only the named set's short-context twins (``across_unseen_dims``), for a
    patch whose records already time the set on this GPU (the set's shapes are then checked as any other shape
    of the contract is, up to ``check_max_elems``)."""
    from astra_sglang.patches.install import resolve_target
    from astra_sglang.patches.runtime import PatchRuntime

    version = installed_sglang_version()
    here = platform_info.current()
    arch, gpu = here.arch, here.gpu
    m = entry.manifest
    problem = (entry.error or "unreadable manifest") if m is None else file_problem(entry.path, m)
    if problem is None and version is None:
        problem = "SGLang is not installed: verify checks against the installed SGLang's original"
    if problem or m is None:
        return VerifyOutcome(entry.patch_id, False, arch, problem or "unreadable manifest")
    elsewhere = unverifiable_here(m, arch)
    if elsewhere:
        return VerifyOutcome(m.patch_id, False, arch, elsewhere, here=False)
    patched = to_measure_here(m, arch, gpu, version)
    problem = device_problem(patched, arch, gpu)
    if problem:
        return VerifyOutcome(entry.patch_id, False, arch, problem)
    say = progress or (lambda line: None)
    interpreted = arch == platform_info.CPU_INTERPRET_ARCH
    if interpreted:
        patched = interpreter_check(patched)
        shapes, record = "test", False
        limit = _interpreter_limit(load_manifest(op_folder(m.op)))
        if limit is not None and limit[0] is not None:  # the dtypes it gets right (unverifiable_here: some are)
            kept = [d for d in patched.guard.dtypes if d not in limit[0]]
            patched = patched.model_copy(update={"guard": patched.guard.model_copy(update={"dtypes": kept})})
    say(f"{m.patch_id}: plugin check against SGLang's original on {len(patched.check_shapes)} shape(s) x "
        f"{'/'.join(patched.guard.dtypes)}" + (" (Triton interpreter, small shapes)" if interpreted else ""))
    status.reset(m.patch_id)
    try:
        from astra_sglang.extract.sglang_env import install_cpu_shims

        install_cpu_shims()
        original = resolve_target(m.targets[0])
    except Exception as e:
        return VerifyOutcome(m.patch_id, False, arch, f"cannot resolve {m.targets[0]}: {e}")
    rt = PatchRuntime(entry.path, patched)
    rt.hook_for(original, m.targets[0])
    ok = rt.activate("cuda" if arch != "cpu-interpret" else "cpu", _announced(original, say))
    st = status.statuses()[m.patch_id]
    out = VerifyOutcome(m.patch_id, ok, arch, st.reason, op_manifest_sha256=patched.op_manifest_sha256)
    if interpreted:
        out.notes.append(INTERPRETER_CHECK.format(shapes=" ".join(map(str, patched.check_shapes))))
    if ok and harness:
        say(f"{m.patch_id}: harness on the {shapes} shapes" + (" (Triton interpreter, correctness only)"
                                                              if interpreted else ""))
        out.harness, note = _harness(entry, shapes, twins_only)
        if note:
            out.notes.append(note)
        if out.harness is not None and not out.harness.ok:
            out.ok = False
            out.detail = f"harness: {out.harness.error or 'incorrect'}"
    if record and version and arch:
        record_verify(m.patch_id, VerifyRecord(
            ok=out.ok, sglang_version=version, arch=arch, gpu=gpu or "",
            manifest_sha256=sha256_file(entry.path / MANIFEST_NAME),
            when=now(), geomean_speedup=out.harness.geomean_speedup if out.harness else None, detail=out.detail))
    return out


def slower_shapes(m: PatchManifest, result: EvalResult | None) -> tuple[list[ShapeTiming], list[ShapeTiming]] | None:
    """The harness's slower shapes, split by the patch's guard: (served, never served). Only the served ones stop
    ``verify --record``: a shape the guard sends to SGLang's original costs a server nothing. Counting them all
    refused decode attention's patch after its contract moved to S+9 (B32 S1033 0.96x on the H100, 2026-12-06)
    although its derived guard no longer serves B = 32 at page size 1. None: no timing to judge by."""
    if result is None or result.timing is None:
        return None
    slower = [s for s in result.timing.shapes if s.verdict == "slower"]
    gpu = platform_info.gpu_of_text(result.device)  # where it serves on the GPU that timed it
    served = [s for s in slower if m.guard.takes(s.dims, s.dtype, gpu)]
    return served, [s for s in slower if s not in served]


def across_unseen_dims(m: PatchManifest, op: Manifest, shapes: str = "paper") -> list[dict[str, int]]:
    """Twins of the named shape set, timed beside it where the patch's guard cannot see a size of the call that
    the timing varies (``OpAdapter.unseen_sizes``: decode attention's mean KV length S lives on the GPU, and a
    decode graph is captured per batch size): each guard point of the set once more at the shortest value the
    contract's decode shapes name, in the same served form (``OpAdapter.resized``). The guard is then derived
    from rows at both ends, and a point serves only where it won at each. 2026-12-07, H100: both decode-attention
    patches served points won at S >= 1033 and were 0.96x / 0.93x at S 512 (the device check). Not for a contract
    whose shapes carry each GPU's served launch configs (fused MoE): those are per GPU."""
    from astra_sglang.contract.eval_config import EvalConfig
    from astra_sglang.harness.shared.suite import served_gpu, timed_shapes
    from astra_sglang.patches.adapters import get_adapter

    if shapes == "test" or served_gpu(op, None) is not None:
        return []
    try:
        adapter = get_adapter(m.op)
    except AstraError:
        return []
    named = [s.dims for s in op.shapes]
    out: list[dict[str, int]] = []
    for name in adapter.unseen_sizes:
        values = [s.dims[name] for s in op.shapes
                  if name in s.dims and "decode" in s.tags and not {"edge", "test"} & set(s.tags)]
        if not values:
            continue
        short, points = min(values), set()
        for dims in timed_shapes(op, EvalConfig(shapes=shapes)):  # type: ignore[arg-type]
            point = tuple(dims.get(k) for k in m.guard.dims)
            if point in points or dims.get(name, short) <= short:
                continue
            points.add(point)
            twin = adapter.resized(dims, name, short)
            if twin not in named and twin not in out:
                out.append(twin)
    return out


def _harness(entry: PatchEntry, shapes: str, twins_only: bool = False) -> tuple[EvalResult | None, str | None]:
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
    from astra_sglang.harness import evaluate
    from astra_sglang.patches.retune import kernel_file

    twins = across_unseen_dims(m, op, shapes)
    twins_only = twins_only and shapes != "test"  # the interpreter's run times nothing: it checks the test shapes
    if twins_only and not twins:
        return None, f"harness skipped: --twins-only, but {m.patch_id}'s guard sees every size its op's timing varies"
    cfg: Any = EvalConfig(shapes=shapes, include_heldout=True,  # type: ignore[arg-type]
                          extra_timed_shapes=twins, only_extra_timed=twins_only)
    if m.source.retune:  # SGLang's own source (its imports too) with our launch table: not a candidate's code
        cfg = cfg.model_copy(update={"screen": False})
    return evaluate(op_dir, kernel_file(entry.path, m, op_dir, op), cfg), None
