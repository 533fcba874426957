"""Argument types that refuse a bad number or path at the command line, in one line, before any work starts;
the parser every sub-command uses (one-line errors, every default shown in ``--help``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn


def has_default(action: argparse.Action) -> bool:
    """Whether ``--help`` should show the option's default: a flag's False, an unset None, an empty text or
    list say nothing."""
    d = action.default
    return not (d is None or d is False or d is argparse.SUPPRESS or d in ("", []) or action.nargs == 0)


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Appends "(default: X)" to an option's help unless the help already says its default in its own words
    (argparse's ArgumentDefaultsHelpFormatter would also print "(default: None)" and repeat stated ones)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if has_default(action) and "default" not in text:
            text += " (default: %(default)s)"
        return text


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the usage block would bury the one line that says what is wrong."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)  # sub-parsers are Parsers too
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def _number(kind: Callable[[str], float], ok: Callable[[float], bool], want: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {want}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {want}, got {text}")
        return value

    return parse


positive_float = _number(float, lambda v: v > 0, "a number > 0")
non_negative_float = _number(float, lambda v: v >= 0, "a number >= 0")
non_negative_int = _number(int, lambda v: v >= 0, "an integer >= 0")
at_least_one = _number(int, lambda v: v >= 1, "an integer >= 1")
at_least_two = _number(int, lambda v: v >= 2, "an integer >= 2")
positive_int = _number(int, lambda v: v >= 1, "an integer >= 1")
fraction = _number(float, lambda v: 0 <= v < 1, "a fraction in [0, 1)")
at_most_16 = _number(int, lambda v: 1 <= v <= 16, "an integer from 1 to 16")


def existing_file(text: str) -> Path:
    """A path that must name a file: a folder given by mistake is named as one, not as missing."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory, not a file")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text} does not exist")
    return path
