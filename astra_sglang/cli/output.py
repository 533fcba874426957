"""Tables and lines for the commands a serving-only install runs (extract, patches, doctor) without ``rich``.

``rich`` comes with the optimizer and harness extras, not with the package: SGLang's environment does not
have it. With rich and a terminal the output is rich's; without rich, or when the output is a pipe or a file
(``patches list | cat``, ``extract --list > ops.txt``), the same calls print plain aligned text: one line per
row, nothing cut or folded to a width, no markup. rich's 80-column tables cut refusal reasons and folded
``extract --list`` into thousands of lines there.
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
        self.rows.append([" ".join(str(c).splitlines()) for c in cells])  # one line per row, for grep and cut

    def __str__(self) -> str:
        widths = [max([len(h), *(len(r[i]) for r in self.rows if i < len(r))]) for i, h in enumerate(self.columns)]
        lines = [self.title] if self.title else []
        for cells in [self.columns, *self.rows]:
            lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip())
        if self.caption:
            lines.append(self.caption)
        return "\n".join(lines)


class PlainConsole:
    """The part of ``rich.console.Console`` these commands use; markup tags are dropped (unless
    ``markup=False``, as for rich), and rich tables print as plain ones."""

    def __init__(self, stderr: bool = False, **_: Any) -> None:
        self.stderr = stderr
        self.is_terminal = False

    def print(self, *objects: Any, markup: bool = True, **_: Any) -> None:
        text = " ".join(_plain(o, markup) for o in objects)
        print(text, file=sys.stderr if self.stderr else sys.stdout)


def _plain(obj: Any, markup: bool = True) -> str:
    """What rich would show of ``obj``, without styles: a table (ours or rich's) as aligned rows, markup
    rendered (so ``literal``'s escapes come out as the brackets they stand for), a ``Text`` as its text."""
    if isinstance(obj, PlainTable):
        return str(obj)
    if _RichTable is not None and isinstance(obj, _RichTable):
        return str(_from_rich(obj))
    if isinstance(obj, str):
        return _unmarked(obj) if markup else obj
    plain = getattr(obj, "plain", None)  # rich.text.Text
    return plain if isinstance(plain, str) else str(obj)


def _unmarked(text: str) -> str:
    if _RichConsole is None:
        return _MARKUP.sub("", text)
    from rich.errors import MarkupError
    from rich.markup import render

    try:
        return render(text).plain
    except MarkupError:  # not markup after all (an unmatched closing tag): shown as written
        return text


def _from_rich(table: Any) -> PlainTable:
    """A rich table's title, headers, cells and caption as a plain table."""
    t = PlainTable(title=_plain(table.title) if table.title else None,
                   caption=_plain(table.caption) if table.caption else None)
    for col in table.columns:
        t.add_column(_plain(col.header))
    for row in zip(*(list(col.cells) for col in table.columns)):
        t.add_row(*(_plain(cell) for cell in row))
    return t


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
    """rich's console on a terminal; elsewhere (a pipe, a file, a log, CI) the plain one, so nothing is cut
    to a width. ``width`` is no longer needed (plain output is never wrapped); callers may still pass it."""
    if _RichConsole is None:
        return PlainConsole(stderr=stderr)
    c = _RichConsole(stderr=stderr)
    return c if c.is_terminal else PlainConsole(stderr=stderr)


def literal(text: str) -> str:
    """Text shown as written: rich reads ``[word]`` as markup and drops it (sgl_kernel's own ``[sgl_kernel]``
    prefix vanished from a refusal reason in ``patches status``); the plain console drops nothing."""
    if _RichConsole is None:
        return text
    from rich.markup import escape

    return escape(text)
