"""The launch parameters an original Triton wrapper exposes, found in its source's AST, and variants of it.

What ``astra-sglang tune OP`` sweeps, per launch ``kernel[grid](...)`` of one of the recipe's kernels:
- ``num_warps``: always (Triton's default 4 when the launch does not pass it); a value the wrapper computes
  from the shape is replaced by each literal (per shape bucket, that is what a dispatch table would do);
- ``num_stages``: when the launch passes it or the kernel has a loop (software pipelining needs one);
- block-size constexprs: a keyword argument named like ``*BLOCK*``/``*TILE*`` of a ``tl.constexpr`` parameter
  whose value is a power-of-two int literal, or a local name assigned once to one (the assignment is changed,
  so a grid computed from the same name follows), swept from a quarter to four times its value.
A kernel under ``triton.autotune`` chooses its own launch options: only its block sizes are swept. Variants are
the source re-printed (``ast.unparse``) with the values changed; nothing here imports the source.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from astra_sglang import pyast
from astra_sglang.contract.op import Manifest
from astra_sglang.contract.result import TuneValue
from astra_sglang.errors import AstraError
from astra_sglang.harness.parent.tune_space import MAX_CONFIGS, TuneError, dispatch_code

WARPS = [1, 2, 4, 8]
STAGES = [1, 2, 3, 4]
TRITON_DEFAULTS = {"num_warps": 4, "num_stages": 3}
_BLOCKISH = re.compile(r"BLOCK|TILE", re.IGNORECASE)


@dataclass(frozen=True)
class LaunchParam:
    name: str  # "merge_state_kernel.num_warps" (+ "@line" when a kernel is launched twice)
    values: list[TuneValue]
    original: str  # the source text of the original value, or "4 (Triton's default)"
    launch_line: int  # the launch call's line
    keyword: str
    assign_line: int | None = None  # a `NAME = <int>` statement to change instead of the keyword
    dict_arg: tuple[str, str] | None = None  # (wrapper, parameter): `keyword` is a key of the config dict it takes


def _kernels(tree: ast.Module, names: list[str]) -> dict[str, tuple[ast.FunctionDef, bool]]:
    """The module's @triton.jit kernels (of ``names`` if given) -> (definition, under triton.autotune)."""
    out = {}
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        decos = [ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list]
        if any(d.endswith("jit") for d in decos) and (not names or node.name in names):
            out[node.name] = (node, any(d.endswith("autotune") for d in decos))
    return out


def _constexprs(fn: ast.FunctionDef) -> set[str]:
    args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
    return {a.arg for a in args if a.annotation is not None and ast.unparse(a.annotation).endswith("constexpr")}


def _has_loop(fn: ast.FunctionDef) -> bool:
    return any(isinstance(n, (ast.For, ast.While)) for n in ast.walk(fn))


def _single_int_assign(scope: ast.AST, name: str) -> ast.Assign | None:
    """The ``NAME = <int>`` statement that sets a launch value: the only assignment of the name, or, when
    branches reassign it (SGLang's decode attention: ``BLOCK = 32``, then ``BLOCK = 16`` under ``if _is_hip``),
    the one unconditional statement of the wrapper's body. A variant changes that statement, so the value swept
    is the one on the path no branch overrides; a branch that does keeps its own value."""
    found = [n for n in ast.walk(scope) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
             and any(isinstance(t, ast.Name) and t.id == name for t in
                     (n.targets if isinstance(n, ast.Assign) else [n.target]))]
    if len(found) > 1:
        body = getattr(scope, "body", [])
        found = [n for n in found if n in body]
    if len(found) == 1 and isinstance(found[0], ast.Assign) and len(found[0].targets) == 1:
        v = found[0].value
        if isinstance(v, ast.Constant) and type(v.value) is int:
            return found[0]
    return None


def _pow2_range(v: int) -> list[TuneValue]:
    return [x for x in (v // 4, v // 2, v, v * 2, v * 4) if x >= 16 and x & (x - 1) == 0]


def find_launch_params(source: str, kernels: list[str]) -> list[LaunchParam]:
    """Every sweepable launch parameter of the named kernels' launches (TuneError when there is none)."""
    tree = pyast.parse(source)
    defs = _kernels(tree, kernels)
    params: list[LaunchParam] = []
    seen: dict[str, int] = {}
    for scope in [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name not in defs]:
        for call in ast.walk(scope):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Subscript)
                    and isinstance(call.func.value, ast.Name) and call.func.value.id in defs):
                continue
            kernel = call.func.value.id
            fn, autotuned = defs[kernel]
            seen[kernel] = seen.get(kernel, 0) + 1
            tag = kernel if seen[kernel] == 1 else f"{kernel}@{call.lineno}"
            kw = {k.arg: k.value for k in call.keywords if k.arg}
            if not autotuned:
                for opt, values in (("num_warps", WARPS), ("num_stages", STAGES)):
                    given = kw.get(opt)
                    if opt == "num_stages" and given is None and not _has_loop(fn):
                        continue
                    if isinstance(given, ast.Constant) and type(given.value) is int:
                        values = sorted(set(values) | {given.value})
                    original = ast.unparse(given) if given is not None else \
                        f"{TRITON_DEFAULTS[opt]} (Triton's default)"
                    params.append(LaunchParam(f"{tag}.{opt}", list(values), original, call.lineno, opt))
            for name in sorted(_constexprs(fn) & set(kw)):
                if not _BLOCKISH.search(name):
                    continue
                value, assign = kw[name], None
                if isinstance(value, ast.Name):
                    assign = _single_int_assign(scope, value.id)
                    value = assign.value if assign is not None else value
                if not (isinstance(value, ast.Constant) and type(value.value) is int and value.value >= 16
                        and value.value & (value.value - 1) == 0):
                    continue
                params.append(LaunchParam(f"{tag}.{name}", _pow2_range(value.value), str(value.value), call.lineno,
                                          name, assign.lineno if assign is not None else None))
    if not params:
        raise TuneError(f"no launch of {', '.join(kernels) or 'a @triton.jit kernel'} found in the source: "
                        "nothing to sweep")
    n = math.prod(len(p.values) for p in params)
    if n > MAX_CONFIGS:
        raise TuneError(f"the original exposes {n} launch configs ({', '.join(p.name for p in params)}), more "
                        f"than the cap of {MAX_CONFIGS}")
    return params


def config_dict_params(source: str, wrapper: str, arg: str, space: dict[str, list[int]]) -> list[LaunchParam]:
    """The keys of a launch-config dict the wrapper takes as ``arg`` (SGLang's fused MoE: ``config``, built by its
    caller from the tuned JSON), each over its values. A variant rebinds the dict first thing in the wrapper, so
    everything the wrapper derives from it (the grid, EVEN_K) follows, as it does when SGLang's tuner passes a
    config. Values come from the op's catalog entry (ours, not a candidate's), so no cap applies here: the sweep
    is chunked and resumable (``tune_baseline``)."""
    tree = pyast.parse(source)
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == wrapper), None)
    if fn is None or arg not in {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}:
        raise TuneError(f"the wrapper {wrapper} with a parameter {arg!r} is not in the source: nothing to sweep")
    if not space:
        raise TuneError(f"an empty config space for {wrapper}({arg}=...): nothing to sweep")
    return [LaunchParam(f"{arg}.{key}", list(values), f"{arg}[{key!r}] (per shape)", fn.lineno, key,
                        dict_arg=(wrapper, arg)) for key, values in space.items()]


class _Apply(ast.NodeTransformer):
    """Each launch value of ``params`` replaced by ``value(param)``: a literal of one config (a sweep variant), or a
    read of the module dict a retune's dispatch sets per call (``retuned_source``)."""

    def __init__(self, params: list[LaunchParam], value: Callable[[LaunchParam], ast.expr]):
        self.by_launch: dict[int, list[tuple[str, ast.expr]]] = {}
        self.by_assign: dict[int, ast.expr] = {}
        self.by_dict: dict[tuple[str, str], list[tuple[str, ast.expr]]] = {}
        for p in params:
            if p.dict_arg is not None:
                self.by_dict.setdefault(p.dict_arg, []).append((p.keyword, value(p)))
            elif p.assign_line is not None:
                self.by_assign[p.assign_line] = value(p)
            else:
                self.by_launch.setdefault(p.launch_line, []).append((p.keyword, value(p)))

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        self.generic_visit(node)
        if node.lineno in self.by_assign:
            node.value = self.by_assign[node.lineno]
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        self.generic_visit(node)
        for (wrapper, arg), items in self.by_dict.items():
            if node.name == wrapper:
                merged = ast.Dict(keys=[None, *(ast.Constant(k) for k, _ in items)],
                                  values=[ast.Name(arg, ast.Load()), *(v for _, v in items)])
                rebind = ast.Assign(targets=[ast.Name(arg, ast.Store())], value=merged)
                doc = int(bool(node.body) and isinstance(node.body[0], ast.Expr)
                          and isinstance(getattr(node.body[0], "value", None), ast.Constant)
                          and isinstance(node.body[0].value.value, str))  # type: ignore[attr-defined]
                node.body.insert(doc, rebind)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Subscript) and node.lineno in self.by_launch:
            for key, value in self.by_launch[node.lineno]:
                node.keywords = [k for k in node.keywords if k.arg != key] + [ast.keyword(key, value)]
        return node


def launch_variant(source: str, params: list[LaunchParam], config: dict[str, TuneValue]) -> str:
    tree = _Apply(params, lambda p: ast.Constant(config[p.name])).visit(pyast.parse(source))
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


RETUNE_DICT = "_ASTRA_LAUNCH"
RetuneTable = list[tuple[dict[str, int], dict[str, TuneValue]]]


def _read_launch(p: LaunchParam) -> ast.expr:
    return ast.Subscript(value=ast.Name(RETUNE_DICT, ast.Load()), slice=ast.Constant(p.name), ctx=ast.Load())


def retuned_source(source: str, params: list[LaunchParam], table: RetuneTable, manifest: Manifest) -> str:
    """SGLang's own source with every swept launch value read at call time from ``_ASTRA_LAUNCH``, which a wrapper
    of the entry point sets from the ``table`` row nearest the call's dims (one config per bucket of the sweep's shapes).
    What a retune patch runs: SGLang's kernels, unchanged but for their launch configs, built from the installed
    SGLang's file each time it loads, so no SGLang code is ever kept in the registry."""
    if not table:
        raise AstraError("retuned_source: an empty table")
    names = {p.name for p in params}
    for _, config in table:
        if set(config) != names:
            raise AstraError(f"retune table row sets {sorted(config)}, SGLang's source exposes {sorted(names)}: "
                             "its launch changed since the sweep; sweep it again (`astra-sglang tune`)")
    tree = _Apply(params, _read_launch).visit(pyast.parse(source))
    text = ast.unparse(ast.fix_missing_locations(tree)) + "\n"
    head = (f"\n# ---- astra-sglang retune: SGLang's launch configs chosen per call (generated) ----\n"
            f"{RETUNE_DICT} = {dict(table[0][1])!r}\n")
    return text + head + dispatch_code(manifest, table, RETUNE_DICT)
