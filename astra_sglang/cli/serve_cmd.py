"""``astra-sglang serve -- <sglang.launch_server arguments>``: SGLang's own server with patches switched on.

Nothing else changes: the same interpreter runs ``python -m sglang.launch_server`` with the arguments as given
(exec, so signals and exit codes are SGLang's). SGLang loads the astra-sglang plugin itself in every process;
this command only sets ``ASTRA_SGLANG_PATCHES`` (default ``all``, i.e. every patch not disabled).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import sys

from astra_sglang.errors import AstraError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="run `python -m sglang.launch_server ...` with patches enabled",
                              description="Everything after `--` goes to sglang.launch_server unchanged.")
    p.add_argument("--patches", default=None,
                   help="ASTRA_SGLANG_PATCHES value: 'all' (default unless already set) or id1,id2")
    p.add_argument("--dry-run", action="store_true", help="print the command and the variable, run nothing")
    p.add_argument("sglang_args", nargs=argparse.REMAINDER, metavar="SGLANG_ARGS",
                   help="sglang.launch_server arguments, passed unchanged (e.g. -- --model-path M)")
    p.set_defaults(handler=cmd_serve)


def server_command(sglang_args: list[str]) -> list[str]:
    args = list(sglang_args)
    if args and args[0] == "--":
        args = args[1:]
    return [sys.executable, "-m", "sglang.launch_server", *args]


def cmd_serve(args: argparse.Namespace) -> int:
    value = args.patches or os.environ.get("ASTRA_SGLANG_PATCHES") or "all"
    if not [a for a in args.sglang_args if a != "--"]:  # SGLang's answer to none is its usage, 300 lines
        raise AstraError("nothing to launch: give the server arguments after `--` (e.g. -- --model-path M)")
    cmd = server_command(args.sglang_args)
    env = dict(os.environ, ASTRA_SGLANG_PATCHES=value)
    if args.dry_run:
        print(f"ASTRA_SGLANG_PATCHES={shlex.quote(value)} {shlex.join(cmd)}")
        return 0
    if importlib.util.find_spec("sglang") is None:
        raise AstraError("SGLang is not installed in this Python; install it with `pip install 'astra-sglang[sglang]'`")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(cmd[0], cmd, env)
    return 0  # not reached
