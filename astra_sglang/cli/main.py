"""Entry point of ``astra-sglang`` / ``python -m astra_sglang``.

Each stage registers its own sub-command from a module of its own (``cli/<stage>_cmd.py`` exposing
``register(subparsers)``), imported lazily so ``--help`` and the serving-side commands never import the
optimizer's dependencies.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Callable, Optional

from astra_sglang.errors import AstraError

# sub-command name -> module under astra_sglang.cli defining register(subparsers)
COMMANDS: dict[str, str] = {
    "extract": "extract_cmd",
    "bench": "bench_cmd",
    "optimize": "optimize_cmd",
    "evaluate": "evaluate_cmd",
    "patches": "patches_cmd",
    "serve": "serve_cmd",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="astra-sglang",
        description="Extract, optimize and safely patch SGLang's own GPU kernels.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        try:
            mod = importlib.import_module(f"astra_sglang.cli.{module}")
        except ModuleNotFoundError as e:
            if e.name and e.name.startswith("astra_sglang.cli."):
                continue  # stage not built yet
            raise
        mod.register(sub)
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Optional[Callable[[argparse.Namespace], int]] = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return int(handler(args) or 0)
    except AstraError as e:
        print(f"astra-sglang: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("astra-sglang: interrupted; everything written so far is kept", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
