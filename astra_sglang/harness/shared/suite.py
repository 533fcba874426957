"""The correctness suite and the timed shapes of one evaluation, built from the manifest.

Visible cases get seeds from a base seed that is recorded in every failure (fresh per evaluation unless fixed).
Held-out cases are derived from a private secret (``heldout.py``) inside this process and handed to the
worker over a pipe: they are never written to the manifest, the run folder or any file an agent reads.
"""

from __future__ import annotations

import ast
import math
import operator
import random

from astra_sglang import pyast
from astra_sglang.contract.base import fit_dim
from astra_sglang.contract.eval_config import DISTRIBUTIONS, EvalConfig
from astra_sglang.contract.op import Manifest, TensorArg, complete_dims, signature_names
from astra_sglang.errors import AstraError
from astra_sglang.harness.shared.protocol import CaseSpec
from astra_sglang.loader.launch import compile_call
from astra_sglang.platform_info import same_gpu

Case = CaseSpec  # one case of the suite, as it travels to the checker


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


class NeedsValues(AstraError):
    """A ``moved`` expression counts drawn values (``distinct(X)``) and none were given: from dims alone the
    traffic is unknown, and a guess is never a count."""


def eval_dim(expr: str, dims: dict[str, int], distinct: dict[str, int] | None = None) -> int:
    """'2*H', 'T', 'H//2', '8' over the case's dims; nothing else is evaluated. In a ``moved`` shape also
    ``distinct(X)``: how many distinct values the generated tensor X holds (``distinct``: those counts, of the
    values the case drew): a MoE GEMM reads the weights of the experts its routing touched, not all E of them, and
    with hot and idle experts that count is no function of the dims (2026-12-01: fused_moe_kernel read as 166% of
    the copy ceiling at T=512 when every expert's weights were counted)."""
    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in dims:
                raise AstraError(f"shape expression {expr!r}: unknown dim {node.id!r} (dims: {sorted(dims)})")
            return dims[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        counted = distinct_of(node)
        if counted is not None:
            if distinct is None or counted not in distinct:
                raise NeedsValues(f"shape expression {expr!r} counts the values of {counted!r}: it needs a drawn case")
            return distinct[counted]
        raise AstraError(f"shape expression {expr!r} is not simple arithmetic over dim names")

    return ev(pyast.parse_eval(expr))


def distinct_of(node: ast.AST) -> str | None:
    """X of a ``distinct(X)`` node, else None."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "distinct"
            and len(node.args) == 1 and isinstance(node.args[0], ast.Name) and not node.keywords):
        return node.args[0].id
    return None


def distinct_refs(shape: list[str] | None) -> set[str]:
    """The tensors a shape's ``distinct(X)`` terms count."""
    found: set[str] = set()
    for expr in shape or []:
        for node in ast.walk(pyast.parse_eval(expr)):
            name = distinct_of(node)
            if name is not None:
                found.add(name)
    return found


def shape_of(shape: list[str], dims: dict[str, int], distinct: dict[str, int] | None = None) -> tuple[int, ...]:
    return tuple(eval_dim(s, dims, distinct) for s in shape)


#: bytes per element of the dtypes a signature names (torch-free: the judge sizes its arena before torch loads)
ELEM_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2, "int8": 1,
              "uint8": 1, "bool": 1}


def tensor_traffic(role: str, nbytes: int) -> int:
    """Minimum traffic of one argument of ``nbytes``: an input read once, an output written once, an in-place
    argument both. The one rule for bytes moved (the harness's GB/s and the profile's columns)."""
    return 2 * nbytes if role == "inplace" else nbytes


def contract_bytes(manifest: Manifest, dims: dict[str, int], dtype: str) -> int | None:
    """Bytes one call moves by the contract at ``dims`` (``{dtype}`` tensors in ``dtype``); None when ``dims`` are
    not exactly the signature's or a tensor's dtype has no known size (never a guess). A dim added to the contract
    later counts at its ``added_default``, as a case recorded before it meant (the profile's LLaMA dims, old runs)."""
    dims = complete_dims(manifest, dims)
    if {d.name for d in manifest.signature.dims} != set(dims):
        return None
    total = 0
    for t in manifest.signature.tensors:
        elem = ELEM_BYTES.get(dtype if t.dtype == "{dtype}" else t.dtype)
        if elem is None:
            return None
        try:
            n = math.prod(shape_of(t.moved or t.shape, dims))
        except NeedsValues:  # the routing's touched experts: known only on drawn values (ArgSet.bytes_moved)
            return None
        total += tensor_traffic(t.role, n * elem)
    return total


def span(shape: tuple[int, ...] | list[int], row_stride: int | None) -> int:
    """Elements a view of ``shape`` covers: all of them contiguous; rows of ``row_stride`` when row-strided."""
    if row_stride is None:
        return math.prod(shape)
    row = math.prod(shape[1:])
    if row_stride < row:
        raise ValueError(f"row stride {row_stride} is shorter than a row of {tuple(shape)} ({row} elements)")
    return shape[0] * row_stride


def row_stride_of(manifest: Manifest, t: TensorArg, dims: dict[str, int]) -> int | None:
    """A row-strided input's stride in elements at ``dims`` (a later-added dim at its default), else None."""
    return shape_of([t.row_stride], complete_dims(manifest, dims))[0] if t.row_stride is not None else None


def largest_numel(manifest: Manifest, dims: dict[str, int]) -> int:
    return max(math.prod(shape_of(t.shape, dims)) for t in manifest.signature.tensors)


def total_numel(manifest: Manifest, dims: dict[str, int]) -> int:
    """The elements of every tensor of a case: what the Triton interpreter's time grows with, roughly. A check
    stops at its first case that makes no progress within the limit (NO VERDICT), so the interpreter runs the
    cheapest first: the K = 4 decode-attention run's Testing agent added a B = 512 case, and every one of the 18
    checks of its round 1 stopped there: the cases queued behind it never ran (2026-12-05)."""
    return sum(math.prod(shape_of(t.shape, dims)) for t in manifest.signature.tensors)


def _selected(manifest: Manifest, which: str, gpu: str | None = None) -> list[dict[str, int]]:
    if which == "test":
        tagged = [s.dims for s in manifest.shapes if "test" in s.tags]
        return tagged or test_shapes(manifest)
    if which == "all":
        return [s.dims for s in manifest.shapes]
    served = served_gpu(manifest, gpu)
    return [s.dims for s in manifest.shapes
            if which in s.tags and (served is None or not s.served_on() or served in s.served_on())]


def served_gpu(manifest: Manifest, gpu: str | None) -> str | None:
    """Whose served launch configs a named shape set times, where the contract carries them per GPU model (fused
    MoE: SGLang's tuned JSON differs between an H100 and an H200): ``gpu`` when the contract has its configs, else
    the first GPU it names; None for a contract whose cases are every GPU's."""
    named = list(dict.fromkeys(g for s in manifest.shapes for g in s.served_on()))
    if not named:
        return None
    return next((g for g in named if gpu and same_gpu(g, gpu)), named[0])


def served_on_note(manifest: Manifest, config: EvalConfig) -> str:
    """The note of a timing on a GPU whose served configs the contract does not carry, else ""."""
    served = served_gpu(manifest, config.gpu)
    if served is None or not config.gpu or same_gpu(served, config.gpu):
        return ""
    return (f"timed on {config.gpu} with the launch configs SGLang serves on {served} (the contract carries its "
            "per-GPU configs only for " + ", ".join(dict.fromkeys(g for s in manifest.shapes for g in s.served_on()))
            + "): the original here may not be what SGLang serves on this GPU")


def timed_shapes(manifest: Manifest, config: EvalConfig) -> list[dict[str, int]]:
    shapes = [] if config.only_extra_timed and config.extra_timed_shapes else _selected(manifest, config.shapes,
                                                                                        config.gpu)
    if config.shapes != "test":
        for extra in config.extra_timed_shapes:
            dims = complete_dims(manifest, extra)
            if dims not in shapes:
                shapes.append(dims)
    if not shapes:
        tags = sorted({t for s in manifest.shapes for t in s.tags} & {"paper", "decode", "prefill"})
        raise AstraError(f"{manifest.short_name}: no shapes tagged {config.shapes!r} in the manifest (its shapes are "
                         f"{', '.join(tags + ['all'])}: pass --shapes {(tags or ['all'])[0]})")
    return shapes


def check_dtypes(manifest: Manifest, config: EvalConfig) -> list[str]:
    supported = manifest.signature.dtypes
    wanted = config.dtypes or supported
    bad = [d for d in wanted if d not in supported]
    if bad:
        raise AstraError(f"{manifest.short_name}: dtype(s) {bad} not supported (op supports {supported})")
    return list(wanted)


def timing_dtypes(manifest: Manifest, config: EvalConfig) -> list[str]:
    if config.timing_dtypes:
        bad = [d for d in config.timing_dtypes if d not in manifest.signature.dtypes]
        if bad:
            raise AstraError(f"{manifest.short_name}: dtype(s) {bad} not supported")
        return list(config.timing_dtypes)
    dtypes = check_dtypes(manifest, config)
    return ["bfloat16"] if "bfloat16" in dtypes else dtypes[:1]


def distributions(manifest: Manifest, config: EvalConfig) -> list[str]:
    has_special = any(t.special_values for t in manifest.signature.tensors)
    wanted = config.distributions or [d for d in DISTRIBUTIONS if d != "special" or has_special]
    bad = [d for d in wanted if d not in DISTRIBUTIONS]
    if bad:
        raise AstraError(f"unknown value distribution(s) {bad}; choose from {DISTRIBUTIONS}")
    found = {f.distribution for f in manifest.findings}  # the original is wrong there: see KernelFinding
    if config.findings_only:
        return [d for d in (config.distributions or DISTRIBUTIONS) if d in found]
    return [d for d in wanted if (d != "special" or has_special) and d not in found]


def _dim_values(manifest: Manifest) -> dict[str, list[int]]:
    values: dict[str, set[int]] = {d.name: set() for d in manifest.signature.dims}
    for s in manifest.shapes:
        for k, v in s.dims.items():
            values.setdefault(k, set()).add(v)
    return {k: sorted(v) for k, v in values.items()}


def _fit(manifest: Manifest, name: str, value: int) -> int:
    dim = next((d for d in manifest.signature.dims if d.name == name), None)
    if dim is None:
        return max(1, value)
    return fit_dim(value, dim.min, dim.max, dim.multiple_of)


def _is_discrete(values: list[int]) -> bool:
    """A dim that takes a few fixed values (head_dim 64/128/256) is drawn from them, not invented."""
    return 0 < len(values) <= 4


#: head dims real models use (Llama 128, Gemma 256, Phi 80/96, GPT-J 256, DeepSeek 192, ...): held-out cases try
#: the legal ones a manifest's list leaves out
COMMON_HEAD_DIMS = (64, 80, 96, 112, 128, 192, 256)


def _off_list(manifest: Manifest, name: str, listed: list[int]) -> list[int]:
    """Legal values of a discrete dim that the manifest's list leaves out: the list's neighbours (one
    ``multiple_of`` step), halves and doubles, and for a head dim the common model values. A kernel right only
    at listed values (head dim 128/256 but not 64 or 80) passes every case drawn from the list (issue 22, 5b).
    Only values the dim's constraints allow exactly (``_fit`` leaves them unchanged)."""
    dim = next((d for d in manifest.signature.dims if d.name == name), None)
    step = dim.multiple_of if dim is not None else 1
    pool = {w for v in listed for w in (v - step, v + step, v // 2, 2 * v)}
    meaning = dim.meaning.lower() if dim is not None else ""
    if "head dim" in meaning or "head_dim" in meaning:
        pool |= set(COMMON_HEAD_DIMS)
    return sorted(v for v in pool if v >= 1 and v not in listed and _fit(manifest, name, v) == v)


def test_shapes(manifest: Manifest) -> list[dict[str, int]]:
    """Three tiny shapes for the CPU suite (TRITON_INTERPRET=1 runs ~2 ms per program).

    Every dim takes 1, 5 and 3 in turn, raised to its min / multiple_of: odd counts exercise tails, and 5 also
    reaches code keyed on multiples of 5. The dims' constraints in the manifest decide what is legal.
    """
    out: list[dict[str, int]] = []
    for free in (1, 5, 3):
        dims = {d.name: _fit(manifest, d.name, free) for d in manifest.signature.dims}
        if dims not in out:
            out.append(dims)
    return out


def _large_special_shape(manifest: Manifest, config: EvalConfig,
                         shapes: list[dict[str, int]]) -> dict[str, int] | None:
    """Where special values also run, besides the shapes up to ``dist_max_elems``: the largest checked shape
    above it (within ``check_max_elems``), or None. A kernel's path taken only above some size (vectorised,
    split) must see inf/NaN too (issue 22, 5c); one case per dtype bounds the added time."""
    if config.shapes == "test":
        return None
    large = [d for d in shapes if config.dist_max_elems < largest_numel(manifest, d) <= config.check_max_elems]
    return max(large, key=lambda d: largest_numel(manifest, d)) if large else None


def build_suite(manifest: Manifest, config: EvalConfig, base_seed: int, secret: bytes | None) -> list[Case]:
    """Visible cases (timed shapes x dtypes x distributions, plus other manifest shapes) then held-out ones."""
    rng = random.Random(base_seed)
    dtypes = check_dtypes(manifest, config)
    dists = distributions(manifest, config)
    timed = timed_shapes(manifest, config)
    shapes: list[tuple[dict[str, int], tuple[str, ...]]] = [(d, ("timed",)) for d in timed]
    if config.check_all_shapes and config.shapes != "test":
        for s in manifest.shapes:
            if s.dims not in timed and largest_numel(manifest, s.dims) <= config.check_max_elems:
                shapes.append((s.dims, tuple(s.tags)))
    cases: list[Case] = []
    for dims, tags in shapes:
        small = config.shapes == "test" or largest_numel(manifest, dims) <= config.dist_max_elems
        for dtype in dtypes:
            for dist in dists:
                if dist == "normal" or small:
                    cases.append(Case(dims=dict(dims), dtype=dtype, distribution=dist, seed=rng.getrandbits(48),
                                      tags=list(tags)))
    # Non-normal distributions on big shapes would dominate the time; make sure each still runs somewhere.
    covered = {(c.dtype, c.distribution) for c in cases}
    smallest = min((d for d, _ in shapes), key=lambda d: largest_numel(manifest, d))
    for dtype in dtypes:
        for dist in dists:
            if (dtype, dist) not in covered:
                cases.append(Case(dims=dict(smallest), dtype=dtype, distribution=dist, seed=rng.getrandbits(48),
                                  tags=["smallest"]))
    biggest = _large_special_shape(manifest, config, [d for d, _ in shapes]) if "special" in dists else None
    if biggest is not None:
        for dtype in dtypes:
            cases.append(Case(dims=dict(biggest), dtype=dtype, distribution="special", seed=rng.getrandbits(48),
                              tags=["large-special"]))
    names = {d.name for d in manifest.signature.dims}
    for extra in config.extra_cases:
        extra = extra.model_copy(update={"dims": complete_dims(manifest, extra.dims)})
        if set(extra.dims) != names:
            raise AstraError(f"extra case dims {sorted(extra.dims)} do not match the op's dims {sorted(names)}")
        if extra.dtype not in manifest.signature.dtypes or extra.distribution not in DISTRIBUTIONS:
            raise AstraError(f"extra case {extra.dtype}/{extra.distribution}: unsupported dtype or distribution")
        if _left_to_gpu(manifest, config, extra.dims):
            continue
        cases.append(Case(dims=dict(extra.dims), dtype=extra.dtype, distribution=extra.distribution,
                          seed=rng.getrandbits(48), tags=["extra"]))
    if config.include_heldout:
        if secret is None:
            raise AstraError("held-out cases need the private secret")
        cases += heldout_cases(manifest, config, secret, dtypes, dists)
    cases += form_cases(manifest, cases)
    if config.shapes == "test":  # the interpreter: cheapest first (stable), so a case too slow for it comes last
        cases.sort(key=lambda c: total_numel(manifest, c.dims))
    return cases


def _left_to_gpu(manifest: Manifest, config: EvalConfig, dims: dict[str, int]) -> bool:
    return config.shapes == "test" and largest_numel(manifest, dims) > config.interpreter_max_elems


LEFT_TO_GPU = "not run here"  # the words by which a check's line (loop/evaluator.what_ran) finds the note


def left_to_gpu_note(manifest: Manifest, config: EvalConfig) -> str:
    """The note a test-shape (interpreter) check carries when it leaves extra cases to the GPU, else ""."""
    left = sum(_left_to_gpu(manifest, config, complete_dims(manifest, e.dims)) for e in config.extra_cases)
    if not left:
        return ""
    return (f"{left} of the suite's {len(config.extra_cases)} extra case(s) {LEFT_TO_GPU}: their largest tensor is "
            f"above {config.interpreter_max_elems} elements, too slow for the Triton interpreter; they run when the "
            "candidate is evaluated on the GPU")


def call_forms(manifest: Manifest) -> list[list[str]]:
    """The other ways SGLang calls the entry point, as its call sites record them (``CallSite.call``), in order.

    SGLang's FlashInfer backend calls merge_state_triton without its output buffers and uses the tensors it
    returns: a kernel right only when given the buffers passed a suite that always passed them (issue 22, 5a).
    A form may leave out only outputs the op returns (``Signature.returns``): anything else cannot be checked,
    and a manifest that records it gets one error, never a silently unchecked form."""
    full = list(manifest.recipe.call)
    known = signature_names(manifest)
    returned = set(manifest.signature.returns or [])
    outputs = {t.name for t in manifest.signature.tensors if t.role == "output"}
    passed_by_recipe = compile_call(full, known).names()
    forms: list[list[str]] = []
    for site in manifest.call_sites:
        if site.call is None or site.binds != "entry_point" or not site.same_function:
            continue
        form = list(site.call)
        if form == full or form in forms:
            continue
        left_out = passed_by_recipe - compile_call(form, known).names()
        if not left_out <= outputs & returned:
            raise AstraError(f"{manifest.short_name}: call site {site.module}:{site.attr} calls it as {form}, leaving "
                             f"out {sorted(left_out - (outputs & returned))}: a call form may leave out only outputs "
                             f"the op returns (signature.returns: {sorted(returned)})")
        forms.append(form)
    return forms


def with_call(manifest: Manifest, call: list[str] | None) -> Manifest:
    """The manifest whose recipe calls the entry point as ``call`` (a recorded form); the manifest itself for None.
    The one way the judge (the original) and the worker (the candidate) build a launcher for a form."""
    if call is None:
        return manifest
    return manifest.model_copy(update={"recipe": manifest.recipe.model_copy(update={"call": list(call)})})


def form_cases(manifest: Manifest, cases: list[Case]) -> list[Case]:
    """Cases run again in each recorded call form (``call_forms``): per form the smallest case of each dtype and
    value distribution, the smallest held-out case of each dtype, and the largest visible timed normal case.

    A subset, not the whole suite: a form changes how outputs are passed, not what is computed, and evaluation of
    a plain candidate must stay within 30 s on paper shapes. Seeds are derived from the picked cases' (a
    held-out one's stays private), so no form case repeats the values of the case it was picked from."""
    forms = call_forms(manifest)
    if not forms:
        return []
    picked: dict[tuple[object, ...], Case] = {}

    def keep(key: tuple[object, ...], c: Case, larger: bool = False) -> None:
        have = picked.get(key)
        n = largest_numel(manifest, c.dims)
        if have is None or (n > largest_numel(manifest, have.dims) if larger else n < largest_numel(manifest, have.dims)):
            picked[key] = c

    for c in cases:
        keep(("heldout", c.dtype) if c.heldout else (c.dtype, c.distribution), c)
        if not c.heldout and "timed" in c.tags and c.distribution == "normal" and c.dtype == cases[0].dtype:
            keep(("large",), c, larger=True)
    chosen = list({id(c): c for c in picked.values()}.values())
    out: list[Case] = []
    for k, form in enumerate(forms):
        out += [c.model_copy(update={"call": list(form), "tags": [*c.tags, "call-form"],
                                     "seed": (c.seed + 0x9E3779B97F4A * (k + 1)) % (1 << 48)}) for c in chosen]
    return out


def heldout_cases(manifest: Manifest, config: EvalConfig, secret: bytes, dtypes: list[str],
                  dists: list[str]) -> list[Case]:
    """Shapes no agent has seen, drawn inside the dims' constraints; seeds from the same private stream.

    A discrete dim mixes its listed values with legal ones off the list (``_off_list``); the first held-out
    shape takes off-list values wherever the constraints allow any. Special values run at any size drawn."""
    import hashlib

    rng = random.Random(hashlib.sha256(secret + manifest.op_id.encode() + config.shapes.encode()).digest())
    values = _dim_values(manifest)
    small = config.shapes == "test"
    off_list = {name: _off_list(manifest, name, seen) for name, seen in values.items() if _is_discrete(seen)}
    cases: list[Case] = []
    tries = 0
    while len(cases) < config.heldout_shapes * len(dtypes) and tries < 200:
        tries += 1
        dims: dict[str, int] = {}
        for name, seen in values.items():
            if _is_discrete(seen) and not small:
                pool = off_list[name]
                off = bool(pool) and ((not cases and tries <= 50) or rng.random() < 0.5)
                dims[name] = rng.choice(pool if off else seen)
                continue
            lo, hi = (1, 9) if small else (max(1, seen[0]), max(seen[-1], 2))
            v = int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
            if rng.random() < 0.5:
                v |= 1  # odd sizes exercise tail handling
            dims[name] = _fit(manifest, name, v)
        limit = 4096 if small else config.check_max_elems
        if largest_numel(manifest, dims) > limit:
            continue
        dist = "special" if "special" in dists and rng.random() < 0.3 else "normal"
        for dtype in dtypes:
            cases.append(Case(dims=dict(dims), dtype=dtype, distribution=dist, seed=rng.getrandbits(48), heldout=True,
                              tags=["heldout"]))
    return cases
