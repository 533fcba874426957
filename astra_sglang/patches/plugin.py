"""SGLang plugin entry point (group ``sglang.srt.plugins``): ``load()`` runs early in every SGLang process.

Off unless ``ASTRA_SGLANG_PATCHES`` asks for patches: then this module imports nothing beyond the stdlib, so
an installed-but-unused astra-sglang costs SGLang nothing (one log line says so). With patches on, one line per
process lists what it installed and refused, and ``status_file`` records what they serve. Never raises:
whatever goes wrong, SGLang keeps serving with its own kernels and one warning line says why.
"""

from __future__ import annotations

import logging

from astra_sglang.patches.env import ENV_SELECT, patches_requested

logger = logging.getLogger("astra_sglang.patches")


def _register_with_sglang(target: str, original: object, hook: object) -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(target, hook, HookType.REPLACE)


def _visible() -> None:
    """SGLang runs plugins before it configures logging (``launch_server``'s main, each scheduler process), so
    with no handler anywhere Python drops INFO records: the start-up line never reached a real server's log.
    Then, and only then, this logger gets its own stderr handler in SGLang's format (and stops propagating, so
    the handler SGLang adds later does not print each line twice)."""
    lg = logging.getLogger("astra_sglang")
    if lg.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", "%Y-%m-%d %H:%M:%S"))
    lg.addHandler(handler)
    lg.setLevel(logging.INFO)
    lg.propagate = False


def load() -> None:
    _visible()
    if not patches_requested():
        logger.info("astra-sglang: patches off (set %s)", ENV_SELECT)
        return
    try:
        from astra_sglang.patches import status_file
        from astra_sglang.patches.install import install_selected, startup_line

        installed = install_selected(_register_with_sglang)
        logger.info(startup_line(installed))
        status_file.start()
    except Exception as e:  # the plugin must never take SGLang down
        logger.warning("astra-sglang patches not installed, SGLang's originals serve: %s: %s", type(e).__name__, e)
