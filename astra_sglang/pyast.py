"""``ast.parse`` for code that runs in several threads at once: a round's K coding agents check candidates
concurrently (their ``check_candidate`` tool calls run in worker threads beside the loop's own checks).

CPython 3.11 keeps the AST converter's recursion depth in interpreter-global state, so two threads parsing at
once can fail with "SystemError: AST constructor recursion depth mismatch" (seen in CI: one of four candidates
lost its round to it). One lock makes parsing serial; it costs milliseconds per candidate.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    with _LOCK:
        return ast.parse(source, filename=filename)


def parse_eval(source: str) -> ast.Expression:
    with _LOCK:
        return ast.parse(source, mode="eval")
