"""The patch registry and SGLang plugin: measured winners installed into SGLang, fail-closed.

Public, cheap to import (no torch): ``counters()`` (calls served per patch by the patch and by SGLang's
original), ``statuses()`` (state and reason per patch), ``activate()`` (check installed patches now).
"""

from __future__ import annotations

from typing import Any

from astra_sglang.patches.status import counters, statuses


def activate(patch_id: str | None = None, device: Any = None) -> dict[str, bool]:
    from astra_sglang.patches.install import activate as _activate

    return _activate(patch_id, device)


__all__ = ["activate", "counters", "statuses"]
