"""A contract checked against itself before any kernel runs: every way it contradicts its own statements.

A drafted contract (or a hand-written one) can be wrong about itself: a shape outside its dims' min / max /
multiple_of, a call item that is no argument, a tensor shape over an unknown dim, a dtype without a tolerance,
an inputs.py that gives a tensor of the wrong shape, a reference that does not return every output. Each is
found here, on CPU with the test shapes, with the exact reason, so a model can fix it; running the original
kernel against such a contract would only produce a confusing disagreement.
"""

from __future__ import annotations

from pathlib import Path

from astra_sglang.contract.op import Manifest, signature_names
from astra_sglang.errors import AstraError
from astra_sglang.harness.shared.suite import eval_dim, shape_of, test_shapes

MAX_PROBLEMS = 8


def _dim_problems(m: Manifest) -> list[str]:
    out: list[str] = []
    dims = {d.name: d for d in m.signature.dims}
    for i, s in enumerate(m.shapes):
        where = f"shape {i} ({s.source})"
        if set(s.dims) != set(dims):
            out.append(f"{where} gives dims {sorted(s.dims)}, the signature declares {sorted(dims)}")
            continue
        for name, v in s.dims.items():
            d = dims[name]
            if v < d.min or (d.max is not None and v > d.max) or v % max(1, d.multiple_of):
                out.append(f"{where}: {name}={v} is outside its dim's constraints (min {d.min}, max {d.max}, "
                           f"multiple_of {d.multiple_of})")
    for d in m.signature.dims:
        # min 0 is a real dim (pool rows outside the batch, kv_indices entries past the rows: catalog ones have it)
        if d.min < 0 or d.multiple_of < 1 or (d.max is not None and d.max < max(d.min, d.multiple_of)):
            out.append(f"dim {d.name}: min {d.min}, max {d.max}, multiple_of {d.multiple_of} allow no value")
    return out


def _signature_problems(m: Manifest) -> list[str]:
    from astra_sglang.loader.launch import compile_call

    out: list[str] = []
    sig = m.signature
    names = signature_names(m)
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        out.append(f"argument names {dupes} appear more than once in the signature")
    if not any(t.role != "input" for t in sig.tensors):
        out.append("the signature has no output or in-place tensor: nothing could be checked")
    probe = {d.name: max(d.min, d.multiple_of) for d in sig.dims}
    drawn = {t.name: 1 for t in sig.tensors if t.generated}  # distinct(X) in `moved` counts a generated X
    for t in sig.tensors:
        for expr in t.shape:
            try:
                eval_dim(expr, probe)
            except AstraError as e:
                out.append(f"tensor {t.name}: {e}")
        for expr in t.moved or []:
            try:
                eval_dim(expr, probe, drawn)
            except AstraError as e:
                out.append(f"tensor {t.name} moved: {e} (distinct() counts a generated tensor: {sorted(drawn)})")
        if t.dtype != "{dtype}":
            from astra_sglang.harness.shared.tensors import torch_dtype

            try:
                torch_dtype(t.dtype)
            except ValueError as e:
                out.append(f"tensor {t.name}: {e}")
    try:
        compile_call(list(m.recipe.call), names)
    except AstraError as e:
        out.append(f"call list: {e}")
    missing_tol = [d for d in sig.dtypes if d not in m.tolerances]
    if missing_tol:
        out.append(f"dtypes {missing_tol} have no tolerance")
    if sig.returns is not None:
        written = {t.name for t in sig.tensors if t.role != "input"}
        bad = [r for r in sig.returns if r not in written]
        if bad:
            out.append(f"returns names {bad}, which are not output or in-place tensors")
    if not m.shapes:
        out.append("the contract lists no shapes")
    return out


def _run_problems(op_dir: Path, m: Manifest) -> list[str]:
    """inputs.py and the reference on the test shapes, on CPU: shapes and the names they return."""
    import torch

    from astra_sglang.harness.shared.tensors import ArgSet
    from astra_sglang.loader.launch import load_inputs, load_reference

    try:
        inputs = load_inputs(op_dir, m)
        reference = load_reference(op_dir, m)
    except Exception as e:  # the draft's own Python: any error is the draft's
        return [f"reference.py / inputs.py do not import: {type(e).__name__}: {e}"]
    written = [t for t in m.signature.tensors if t.role != "input"]
    for dims in test_shapes(m):
        for dtype in m.signature.dtypes:
            where = f"dims={dims} dtype={dtype}"
            try:
                args = ArgSet(m, dims, dtype, "cpu", inputs)
                args.fill("normal", torch.Generator().manual_seed(0))
            except Exception as e:
                return [f"make_inputs at {where}: {e}"]
            try:
                got = reference(**args.args())
            except Exception as e:
                return [f"the reference raised at {where}: {type(e).__name__}: {str(e)[:500]}"]
            if not isinstance(got, dict):
                return [f"the reference returned {type(got).__name__} at {where}, not a dict of its outputs"]
            missing = [t.name for t in written if t.name not in got]
            if missing:
                return [f"the reference does not return {missing} at {where} (it returned {sorted(got)})"]
            for t in written:
                want = shape_of(t.shape, dims)
                value = got[t.name]
                if not isinstance(value, torch.Tensor) or tuple(value.shape) != want:
                    shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                    return [f"the reference returns {t.name!r} as {shape} at {where}; the signature says {want}"]
    return []


def contract_problems(op_dir: Path, manifest: Manifest) -> list[str]:
    """Every self-contradiction found (at most a few), statics first; [] when the contract is consistent."""
    problems = _dim_problems(manifest) + _signature_problems(manifest)
    if not problems:
        problems = _run_problems(Path(op_dir), manifest)
    return problems[:MAX_PROBLEMS]
