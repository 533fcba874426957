"""SGLang plugin entry point (group ``sglang.srt.plugins``): ``load()`` runs early in every SGLang process.

Off unless ``ASTRA_SGLANG_PATCHES`` asks for patches: then this module imports nothing beyond the stdlib, so
an installed-but-unused astra-sglang costs SGLang nothing. Never raises: whatever goes wrong, SGLang keeps
serving with its own kernels and one warning line says why.
"""

from __future__ import annotations

import logging

from astra_sglang.patches.env import patches_requested

logger = logging.getLogger("astra_sglang.patches")


def _register_with_sglang(target: str, original: object, hook: object) -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(target, hook, HookType.REPLACE)


def load() -> None:
    if not patches_requested():
        return
    try:
        from astra_sglang.patches.install import install_selected

        installed = install_selected(_register_with_sglang)
        if installed:
            logger.info("astra-sglang: patches registered (checked at first use): %s", ", ".join(sorted(installed)))
    except Exception as e:  # the plugin must never take SGLang down
        logger.warning("astra-sglang patches not installed, SGLang's originals serve: %s: %s", type(e).__name__, e)
