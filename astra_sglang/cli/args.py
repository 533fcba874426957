"""Argument types that refuse a bad number at the command line, in one line, before any work starts."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the usage block would bury the one line that says what is wrong."""

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
