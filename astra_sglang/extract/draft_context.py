"""What a Contract agent reads about one op, taken from the installed SGLang at run time.

The kernel's source and launch wrapper, the functions in sglang/srt that call it (found by a text search then
an AST walk, so the agent sees the shapes and flags SGLang really passes), and for a CUDA JIT op the .cuh files
and the Python module that ``load_jit``'s them. Nothing is imported: reading never triggers a build.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.extract.draft import DraftTarget
from astra_sglang.extract.sglang_env import jit_dir, sglang_root
from astra_sglang.extract.source_scan import module_file

MAX_FILE_CHARS = 60_000
MAX_CALLER_LINES = 80
MAX_CALLERS = 10


@dataclass
class SourceText:
    path: str  # relative to the sglang package
    text: str


@dataclass
class DraftContext:
    target: DraftTarget
    kernel: list[SourceText]  # the Triton module, or the CUDA .cuh files
    wrapper: SourceText | None  # CUDA JIT: the Python module that load_jit's; Triton: inside ``kernel``
    callers: list[SourceText] = field(default_factory=list)  # 'path:line in function' -> its source


def _rel(path: Path) -> str:
    return path.resolve().relative_to(sglang_root().resolve()).as_posix()


def _clip(text: str, limit: int = MAX_FILE_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n... [{len(text) - limit} more characters cut]\n"


def read_sglang_file(rel: str) -> str:
    """A file of the installed sglang package by its path inside it; nothing outside the package is read."""
    root = sglang_root().resolve()
    path = (root / rel.lstrip("/").removeprefix("sglang/")).resolve()
    if not path.is_relative_to(root):
        raise AstraError(f"{rel!r} is outside the sglang package")
    if not path.is_file():
        raise AstraError(f"no file {rel!r} in the sglang package")
    return _clip(path.read_text(errors="replace"))


def _calls(node: ast.AST, name: str) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            f = sub.func
            if (isinstance(f, ast.Name) and f.id == name) or (isinstance(f, ast.Attribute) and f.attr == name):
                return True
    return False


def find_callers(name: str, skip: Path | None = None) -> list[SourceText]:
    """Functions under sglang/srt that call ``name``: the serving call sites, each with its source."""
    found: list[SourceText] = []
    srt = sglang_root() / "srt"
    for path in sorted(srt.rglob("*.py")):
        if skip is not None and path.resolve() == skip.resolve():
            continue
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if name + "(" not in text:
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name != name and _calls(node, name):
                inner = [n for n in ast.walk(node) if n is not node
                         and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and _calls(n, name)]
                if inner:
                    continue  # the innermost function that calls it is reported
                lines = text.splitlines()[node.lineno - 1:node.end_lineno]
                if len(lines) > MAX_CALLER_LINES:
                    lines = lines[:MAX_CALLER_LINES] + [f"    ... [{len(lines) - MAX_CALLER_LINES} more lines]"]
                found.append(SourceText(f"{_rel(path)}:{node.lineno} in {node.name}", "\n".join(lines)))
                if len(found) >= MAX_CALLERS:
                    return found
    return found


def gather_context(target: DraftTarget) -> DraftContext:
    attr = target.entry_point.partition(":")[2].split(".")[-1]
    if target.kind == "triton":
        path = module_file(target.module)
        if path is None:
            raise AstraError(f"{target.op_id}: module {target.module} not found in the installed SGLang")
        kernel = [SourceText(_rel(path), _clip(path.read_text()))]
        return DraftContext(target, kernel, None, find_callers(attr, skip=path))
    csrc = jit_dir() / "csrc"
    kernel = [SourceText(_rel(csrc / s), _clip((csrc / s).read_text())) for s in target.sources
              if (csrc / s).is_file()]
    if not kernel:
        raise AstraError(f"{target.op_id}: its CUDA sources {list(target.sources)} are not in the installed SGLang")
    wrapper_path = module_file(target.module)
    wrapper = SourceText(_rel(wrapper_path), _clip(wrapper_path.read_text())) if wrapper_path else None
    return DraftContext(target, kernel, wrapper, find_callers(attr, skip=wrapper_path))


def render_context(ctx: DraftContext) -> str:
    """The agent's first message: the op and every source it needs, as Markdown."""
    t = ctx.target
    parts = [f"# Op {t.op_id}", f"- kind: {t.kind}", f"- entry point (what SGLang calls): `{t.entry_point}`",
             f"- source module: `{t.module}`"]
    for src in ctx.kernel:
        lang = "python" if src.path.endswith(".py") else "cpp"
        parts += [f"\n## Kernel source: sglang/{src.path}", f"```{lang}\n{src.text}\n```"]
    if ctx.wrapper is not None:
        parts += [f"\n## Python module that builds it with load_jit: sglang/{ctx.wrapper.path}",
                  f"```python\n{ctx.wrapper.text}\n```"]
    if ctx.callers:
        parts.append("\n## Call sites in sglang/srt (the functions that call the entry point)")
        for c in ctx.callers:
            parts += [f"### sglang/{c.path}", f"```python\n{c.text}\n```"]
    else:
        parts.append("\n## Call sites in sglang/srt: none found by name (read_sglang_file can read others)")
    return "\n".join(parts)
