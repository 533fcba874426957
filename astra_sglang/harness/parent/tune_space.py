"""A Triton candidate's declared parameter space, one source per point of it, and the frozen dispatch table.

A candidate declares at module level ``TUNE = {"ROWS": [1, 2, 4], "num_warps": [2, 4, 8]}`` and
``CONFIG = {"ROWS": 4, "num_warps": 4}`` (the same keys), and its wrapper reads ``CONFIG[...]`` when it is
called. Nothing here imports or runs the candidate: the space is read from the AST, and every variant is the
candidate's text with the ``CONFIG`` line replaced by one literal config and ``TUNE`` removed, so the screen,
the build and the checker see each variant exactly as they would see a hand-written candidate. The frozen
source (``freeze``) is the same text with a ``TUNED`` table and, when the table has more than one row, a
wrapper that picks the row nearest to the call's shape: nothing is tuned when SGLang serves it.
"""

from __future__ import annotations

import ast
import itertools
import math
from dataclasses import dataclass

from astra_sglang import pyast
from astra_sglang.contract.op import Manifest, entry_and_call
from astra_sglang.contract.result import TuneValue
from astra_sglang.errors import AstraError

MAX_CONFIGS = 64  # a sweep over more points is a search, not a tuning step: refuse it


class TuneError(AstraError):
    """A malformed TUNE/CONFIG declaration (one line, names the rule)."""


@dataclass(frozen=True)
class TuneSpace:
    params: dict[str, list[TuneValue]]
    tune_lines: tuple[int, int]  # first and last line (1-based) of the TUNE statement
    config_lines: tuple[int, int]

    def configs(self) -> list[dict[str, TuneValue]]:
        """Every point, in declaration order (the last parameter varies fastest)."""
        names = list(self.params)
        return [dict(zip(names, values)) for values in itertools.product(*self.params.values())]


def _literal(node: ast.expr, what: str) -> TuneValue:
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError):
        raise TuneError(f"{what} must be a literal int, float, bool or str (line {node.lineno})") from None
    if not isinstance(value, (int, float, bool, str)):
        raise TuneError(f"{what} must be a literal int, float, bool or str, not {type(value).__name__} "
                        f"(line {node.lineno})")
    return value


def _module_assign(tree: ast.Module, name: str) -> list[ast.Assign]:
    return [s for s in tree.body if isinstance(s, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in s.targets)]


def _own_lines(tree: ast.Module, stmt: ast.stmt, name: str) -> tuple[int, int]:
    """The statement's lines, which must hold nothing else (it is replaced line by line)."""
    if len(stmt.targets) != 1:  # type: ignore[attr-defined]
        raise TuneError(f"{name} must be assigned alone (`{name} = {{...}}`), line {stmt.lineno}")
    start, end = stmt.lineno, stmt.end_lineno or stmt.lineno
    for other in tree.body:
        if other is not stmt and (other.end_lineno or other.lineno) >= start and other.lineno <= end:
            raise TuneError(f"{name} must be on lines of its own (line {stmt.lineno} holds another statement)")
    return start, end


def tune_cap(candidates_per_round: int) -> int:
    """Each candidate's share of a round's sweep budget: K candidates of MAX_CONFIGS points each made one merge_state
    round need more than 6 GPU-minutes on the H200 (2026-12-01), against ~1 minute for one."""
    return max(8, MAX_CONFIGS // max(1, candidates_per_round))


def find_space(source: str, max_configs: int = MAX_CONFIGS) -> TuneSpace | None:
    """The declared space, None when the source declares no TUNE; TuneError when the declaration is malformed or
    declares more than ``max_configs`` points (a K-candidate round shares one budget: see tune_cap)."""
    try:
        tree = pyast.parse(source)
    except SyntaxError:
        return None  # the build reports the syntax error
    tunes = _module_assign(tree, "TUNE")
    if not tunes:
        return None
    if len(tunes) > 1:
        raise TuneError(f"TUNE is assigned {len(tunes)} times at module level; declare it once")
    tune = tunes[0]
    if not isinstance(tune.value, ast.Dict) or not tune.value.keys:
        raise TuneError(f"TUNE must be a non-empty dict literal of lists, e.g. TUNE = {{\"ROWS\": [1, 2, 4]}} "
                        f"(line {tune.lineno})")
    params: dict[str, list[TuneValue]] = {}
    for k, v in zip(tune.value.keys, tune.value.values):
        if not (isinstance(k, ast.Constant) and isinstance(k.value, str) and k.value.isidentifier()):
            raise TuneError(f"TUNE keys must be identifier strings (line {tune.lineno})")
        if not isinstance(v, (ast.List, ast.Tuple)) or not v.elts:
            raise TuneError(f"TUNE[{k.value!r}] must be a non-empty list of values (line {v.lineno})")
        values = [_literal(e, f"TUNE[{k.value!r}] values") for e in v.elts]
        if len(set(map(repr, values))) != len(values):
            raise TuneError(f"TUNE[{k.value!r}] lists a value twice")
        params[k.value] = values
    n = math.prod(len(v) for v in params.values())
    if n > max_configs:
        raise TuneError(f"TUNE declares {n} configs, more than the cap of {max_configs}"
                        + (f" a candidate has in a round of several ({MAX_CONFIGS} shared)" if max_configs < MAX_CONFIGS
                           else "") + "; narrow the lists")
    configs = _module_assign(tree, "CONFIG")
    if len(configs) != 1 or not isinstance(configs[0].value, ast.Dict):
        raise TuneError("a candidate with TUNE must assign CONFIG once at module level, a dict literal with the "
                        "same keys (the values the wrapper reads when called)")
    keys = [_literal(k, "CONFIG keys") for k in configs[0].value.keys if k is not None]
    if sorted(map(str, keys)) != sorted(params):
        raise TuneError(f"CONFIG's keys {sorted(map(str, keys))} must be TUNE's keys {sorted(params)}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "TUNE" and isinstance(node.ctx, ast.Load):
            raise TuneError(f"the code reads TUNE (line {node.lineno}); read CONFIG, TUNE is removed from "
                            "every variant")
    return TuneSpace(params, _own_lines(tree, tune, "TUNE"), _own_lines(tree, configs[0], "CONFIG"))


def _config_text(config: dict[str, TuneValue]) -> str:
    return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in config.items()) + "}"


def _replace(source: str, space: TuneSpace, config_line: str, tune_line: str) -> str:
    """Both statements replaced in place, padded with blank lines so every other line keeps its number."""
    lines = source.splitlines(keepends=True)
    for (start, end), text in sorted(((space.config_lines, config_line), (space.tune_lines, tune_line)),
                                     reverse=True):
        lines[start - 1:end] = [text + "\n"] + ["\n"] * (end - start)
    return "".join(lines)


def variant_source(source: str, space: TuneSpace, config: dict[str, TuneValue], label: str) -> str:
    return _replace(source, space, f"CONFIG = {_config_text(config)}",
                    f"# TUNE removed by astra-sglang tune: {label}")


def call_dims(manifest: Manifest) -> set[str]:
    """The dims a frozen table's dispatch can read off a call (tensor axes named by one dim); the others (a context
    length held in index data, a pool size) play no part in which row a call gets."""
    return set(_dim_getters(manifest))


def _dim_getters(manifest: Manifest) -> dict[str, tuple[int, str, int]]:
    """dim -> (position in the wrapper's call, argument name, axis) of the first tensor that has it as an axis."""
    _, call = entry_and_call(manifest, "triton")
    shapes = {t.name: t.shape for t in manifest.signature.tensors}
    out: dict[str, tuple[int, str, int]] = {}
    for pos, item in enumerate(call):
        key, eq, rest = item.partition("=")
        name = rest if eq and key.isidentifier() and key not in shapes else item
        for axis, expr in enumerate(shapes.get(name, [])):
            if expr.isidentifier() and expr not in out:
                out[expr] = (-1 if eq and name == rest else pos, key if eq and name == rest else name, axis)
    return out


_DISPATCH = '''

# ---- astra-sglang tune: frozen dispatch table (generated; nothing is tuned when this runs) ----
# Each row: the timed shape (a bucket) and the config the sweep chose there; a call uses the row whose dims
# are nearest to its own (sum of |log| differences). Every row's config passed the harness's checks.
import math as _astra_math

TUNED = [
{rows}
]


def _astra_dims(args, kwargs):
    dims = {{}}
{getters}
    return dims


def _astra_config(args, kwargs):
    try:
        dims = _astra_dims(args, kwargs)
    except (AttributeError, IndexError, KeyError, TypeError):
        return TUNED[0][1]
    best, best_d = TUNED[0][1], None
    for key, config in TUNED:
        d = sum(abs(_astra_math.log(max(dims[k], 1)) - _astra_math.log(max(v, 1))) for k, v in key.items()
                if k in dims)
        if best_d is None or d < best_d:
            best, best_d = config, d
    return best


_astra_untuned_{entry} = {entry}


def {entry}(*args, **kwargs):
    {config}.update(_astra_config(args, kwargs))
    return _astra_untuned_{entry}(*args, **kwargs)
'''


def freeze(source: str, space: TuneSpace, table: list[tuple[dict[str, int], dict[str, TuneValue]]],
           manifest: Manifest) -> str:
    """The shipped source: TUNE gone, CONFIG the first row's config, a TUNED table, and (more than one row) a
    wrapper of the entry point that sets CONFIG from the nearest row before each call."""
    if not table:
        raise AstraError("freeze: an empty table")
    rows = len(table)
    head = (f"# TUNE frozen by astra-sglang tune: {rows} bucket(s) in TUNED below; "
            f"swept {', '.join(f'{k}={v}' for k, v in space.params.items())}")
    text = _replace(source, space, f"CONFIG = {_config_text(table[0][1])}", head)
    if not text.endswith("\n"):
        text += "\n"
    if rows == 1:
        return text + f"\n# ---- astra-sglang tune: one config won on every timed shape ----\nTUNED = [\n" \
                      f"    ({table[0][0]!r}, {_config_text(table[0][1])}),\n]\n"
    return text + dispatch_code(manifest, table, "CONFIG")


def dispatch_code(manifest: Manifest, table: list[tuple[dict[str, int], dict[str, TuneValue]]], config: str) -> str:
    """The TUNED table and the wrapper of the op's entry point that sets the module dict ``config`` from the row
    nearest each call's dims: appended to a frozen candidate, and to SGLang's own source by a retune patch."""
    entry, _ = entry_and_call(manifest, "triton")
    getters = []
    for dim, (pos, name, axis) in _dim_getters(manifest).items():
        arg = f"kwargs[{name!r}]" if pos < 0 else f"(args[{pos}] if len(args) > {pos} else kwargs[{name!r}])"
        getters.append(f"    dims[{dim!r}] = int({arg}.shape[{axis}])")
    return _DISPATCH.format(rows="\n".join(f"    ({d!r}, {_config_text(c)})," for d, c in table),
                            getters="\n".join(getters) or "    pass", entry=entry, config=config)
