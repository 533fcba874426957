"""SGLang plugin entry point (group ``sglang.srt.plugins``): ``load()`` runs early in every SGLang process.

Off unless ``ASTRA_SGLANG_PATCHES`` asks for patches: then this module imports nothing beyond the stdlib, so
an installed-but-unused astra-sglang costs SGLang nothing (one log line says so). With patches on, one line per
process lists what it installed and refused, and ``status_file`` records what they serve. Never raises:
whatever goes wrong, SGLang keeps serving with its own kernels and one warning line says why.
"""

from __future__ import annotations

import logging
import sys
import time

from astra_sglang.patches.env import ENV_SELECT, patches_requested

logger = logging.getLogger("astra_sglang.patches")


def _register_with_sglang(target: str, original: object, hook: object) -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(target, hook, HookType.REPLACE)


def _hooked_by_another_plugin(target: str) -> str | None:
    """Who else has a hook on ``target`` (a plugin loaded before this one), or None.

    A REPLACE of ours would override theirs: their change would silently stop serving, and our fallback would be
    SGLang's original, not what they meant to serve. Why not AROUND, which hands each call the chain below it:
    our first-call check validates against SGLang's original (the kernel the contract describes); falling back to
    another plugin's function was never checked against, and an AROUND frame costs every eager call one more
    Python call. So the call site is left to them, and the refusal says so."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    hooks = HookRegistry._hooks.get(target) or []  # .get: the registry is a defaultdict
    if not hooks:
        return None
    who = sorted({getattr(src, "plugin_name", None) or "an unnamed source" for _, _, src in hooks})
    kinds = sorted({getattr(ht, "value", str(ht)) for ht, _, _ in hooks})
    return f"{'/'.join(kinds)} hook(s) of {', '.join(who)}"


def _startup(line: str) -> None:
    """The process's one start-up line, where an operator will see it. SGLang runs plugins before it applies
    ``--log-level`` (``launch_server``'s main, each scheduler process): by then an import has left the root logger
    at WARNING, so an INFO record was dropped and a real server's log had the plugin's warnings but not this line.
    Then it goes straight to stderr, in SGLang's log format."""
    if logger.isEnabledFor(logging.INFO) and logger.hasHandlers():
        logger.info(line)
        return
    sys.stderr.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {line}\n")
    sys.stderr.flush()


def load() -> None:
    if not patches_requested():
        _startup(f"astra-sglang: patches off (set {ENV_SELECT})")
        return
    try:
        from astra_sglang.patches import status_file
        from astra_sglang.patches.install import install_selected, startup_line

        installed = install_selected(_register_with_sglang, conflict=_hooked_by_another_plugin)
        _startup(startup_line(installed))
        status_file.start()
    except Exception as e:  # the plugin must never take SGLang down
        logger.warning("astra-sglang patches not installed, SGLang's originals serve: %s: %s", type(e).__name__, e)
