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


def load() -> None:
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
