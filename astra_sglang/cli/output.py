"""Tables and lines for the commands a serving-only install runs (extract, patches, doctor) without ``rich``.

``rich`` comes with the optimizer and harness extras, not with the package: SGLang's environment does not
have it. With rich the output is rich's; without it, the same calls print plain aligned text.
"""

from __future__ import annotations

import re
import sys
from typing import Any

_MARKUP = re.compile(r"\[/?[a-z][a-z ]*\]|\[/\]")


class PlainTable:
    """The part of ``rich.table.Table`` these commands use."""

    def __init__(self, title: str | None = None, caption: str | None = None, **_: Any) -> None:
        self.title, self.caption = title, caption
        self.columns: list[str] = []
        self.rows: list[list[str]] = []

    def add_column(self, header: str, **_: Any) -> None:
        self.columns.append(header)

    def add_row(self, *cells: str, **_: Any) -> None:
        self.rows.append([str(c) for c in cells])

    def __str__(self) -> str:
        widths = [max([len(h), *(len(r[i]) for r in self.rows if i < len(r))]) for i, h in enumerate(self.columns)]
        lines = [self.title] if self.title else []
        for cells in [self.columns, *self.rows]:
            lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip())
        if self.caption:
            lines.append(self.caption)
        return "\n".join(lines)


class PlainConsole:
    """The part of ``rich.console.Console`` these commands use; markup tags are dropped."""

    def __init__(self, stderr: bool = False, **_: Any) -> None:
        self.stderr = stderr
        self.is_terminal = False

    def print(self, *objects: Any, **_: Any) -> None:
        text = " ".join(str(o) if isinstance(o, PlainTable) else _MARKUP.sub("", str(o)) for o in objects)
        print(text, file=sys.stderr if self.stderr else sys.stdout)


_RichConsole: Any
_RichTable: Any
try:
    from rich.console import Console as _RichConsole
    from rich.table import Table as _RichTable
except ImportError:  # a serving-only install
    _RichConsole = None
    _RichTable = None

HAVE_RICH = _RichConsole is not None
Table: Any = _RichTable if _RichTable is not None else PlainTable


def console(stderr: bool = False, width: int | None = None) -> Any:
    """A console for this command; ``width`` applies when the output is not a terminal (logs, CI, pipes)."""
    if _RichConsole is None:
        return PlainConsole(stderr=stderr)
    c = _RichConsole(stderr=stderr)
    return _RichConsole(stderr=stderr, width=width) if width and not c.is_terminal else c


def literal(text: str) -> str:
    """Text shown as written: rich reads ``[word]`` as markup and drops it (sgl_kernel's own ``[sgl_kernel]``
    prefix vanished from a refusal reason in ``patches status``); the plain console drops nothing."""
    if _RichConsole is None:
        return text
    from rich.markup import escape

    return escape(text)
