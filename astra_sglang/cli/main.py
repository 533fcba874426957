"""Entry point of ``astra-sglang`` / ``python -m astra_sglang``.

Each stage registers its own sub-command from a module of its own (``cli/<stage>_cmd.py`` exposing
``register(subparsers)``); those modules import their stage lazily inside the handler, so ``--help`` and the
serving-side commands never import the optimizer's dependencies.

Every way a command can end is decided here once: an ``AstraError`` is one line and exit 2; Ctrl-C or SIGTERM
is "interrupted" (130 / 143) after the command has written down what it finished; a closed stdout pipe
(``... --json | head``) ends the command quietly. Both signals raise in the main thread where it stands: left to
itself, ``asyncio.run`` turns Ctrl-C into a cancellation of its main task only, and openai-agents finishes an
in-flight model call before it honours that, so Ctrl-C waited for the model's answer (up to the request timeout).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from astra_sglang import __version__
from astra_sglang.cli.args import Parser
from astra_sglang.errors import AstraError

# sub-command name -> module under astra_sglang.cli defining register(subparsers)
COMMANDS: dict[str, str] = {
    "extract": "extract_cmd",
    "bench": "bench_cmd",
    "optimize": "optimize_cmd",
    "evaluate": "evaluate_cmd",
    "report": "report_cmd",
    "patches": "patches_cmd",
    "serve": "serve_cmd",
    "doctor": "doctor_cmd",
    "validate-contract": "validate_contract_cmd",
    "repin": "repin_cmd",
    "tune": "tune_cmd",
    "validate": "validate_cmd",
    "profile": "profile_cmd",
    "e2e": "e2e_cmd",
}
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM, what a shell reports for a process SIGTERM ended
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what `cat big | head` reports for cat


class Terminated(KeyboardInterrupt):
    """SIGTERM, delivered like Ctrl-C so every ``except KeyboardInterrupt`` cleanup runs for it too."""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="astra-sglang",
        description="Extract, optimize and safely patch SGLang's own GPU kernels.",
    )
    parser.add_argument("--version", action="version", version=f"astra-sglang {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS.values():
        importlib.import_module(f"astra_sglang.cli.{module}").register(sub)
    return parser


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated()


def _on_sigint(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt()


def _quiet_stdout() -> None:
    """After a reader closed the pipe, Python's final flush of stdout would print a second traceback."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):  # not a real file (a test's capture): nothing will flush into a pipe
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, a bad argument: an exit code for callers of main() too
        return e.code if isinstance(e.code, int) else 2
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    return run_handler(handler, args)


def run_handler(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    if in_main_thread:
        signal.signal(signal.SIGTERM, _on_sigterm)
        if previous[signal.SIGINT] is signal.default_int_handler:  # not where Ctrl-C was set to be ignored
            signal.signal(signal.SIGINT, _on_sigint)
    try:
        code = int(handler(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handling below
        return code
    except AstraError as e:
        print(f"astra-sglang: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt as e:
        print("astra-sglang: interrupted; everything written so far is kept", file=sys.stderr)
        return EXIT_TERMINATED if isinstance(e, Terminated) else EXIT_INTERRUPTED
    finally:
        if in_main_thread:
            for sig, handler_before in previous.items():
                signal.signal(sig, handler_before if handler_before is not None else signal.SIG_DFL)


if __name__ == "__main__":
    raise SystemExit(main())
