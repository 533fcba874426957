"""The text of an op folder's own modules (reference.py, inputs.py, adapter.py), written from real functions.

A hand-written op keeps its reference, inputs and adapter as functions in its catalog module, where they are
linted and type-checked; the folder gets a stand-alone module rebuilt from them (as FlashInfer's trace
templates do with inspect.getsource). What that module needs besides the functions (docstring, imports,
constants, helpers) is declared, not guessed. A drafted contract's text arrives from a model: it is kept as
written.
"""

from __future__ import annotations

import ast
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FileText:
    """One written module: a docstring, import lines, constants and functions, or a text taken verbatim."""

    doc: str | None = None  # the text between the docstring's triple quotes
    imports: tuple[str, ...] = ()  # lines; "" separates isort's groups
    constants: tuple[str, ...] = ()  # names of assignments in the functions' module, copied with their comments
    functions: tuple[Callable[..., Any], ...] = ()  # helpers first: the order they are written in
    given: str | None = None  # a text written as it is: a drafted contract's, as the model wrote it
    # blank lines between the imports and the first function: 2, except where a pinned file has another count
    blank_lines_before_functions: int = 2

    def __post_init__(self) -> None:
        if self.given is not None and (self.doc is not None or self.imports or self.constants or self.functions):
            raise ValueError("a FileText is a given text or functions with what they need, not both")

    @classmethod
    def verbatim(cls, text: str) -> FileText:
        return cls(given=text)

    def text(self) -> str:
        """The module's text; for functions, byte for byte what the op folders pin by SHA-256."""
        if self.given is not None:
            return self.given
        sections: list[tuple[int, str]] = []  # (blank lines before, text ending in a newline)
        if self.doc is not None:
            sections.append((0, f'"""{self.doc}"""\n'))
        if self.imports:
            sections.append((1, "".join(f"{line}\n" for line in self.imports)))
        if self.constants:
            sections.append((1, "".join(_constant_source(self._module_source(), name) for name in self.constants)))
        for i, fn in enumerate(self.functions):
            gap = self.blank_lines_before_functions if i == 0 and self.imports and not self.constants else 2
            sections.append((gap, inspect.getsource(fn)))
        return "".join(("\n" * gap if n else "") + body for n, (gap, body) in enumerate(sections))

    def _module_source(self) -> str:
        if not self.functions:
            raise ValueError("constants are read from the functions' module: declare at least one function")
        return inspect.getsource(sys.modules[self.functions[0].__module__])


def _constant_source(module_source: str, name: str) -> str:
    """The assignment to ``name`` at module level, with the comment lines right above it."""
    lines = module_source.splitlines(keepends=True)
    for node in ast.parse(module_source).body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            start = node.lineno - 1
            while start > 0 and lines[start - 1].lstrip().startswith("#"):
                start -= 1
            return "".join(lines[start:node.end_lineno])
    raise ValueError(f"no module-level assignment to {name}")

