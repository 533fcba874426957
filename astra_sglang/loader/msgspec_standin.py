"""A stand-in for ``msgspec`` where SGLang's vendored modules need it and the host lacks it (the H200 image).

SGLang's kernel registry (``sglang.kernels.spec``) and a few result records declare ``msgspec.Struct``
classes: plain typed records, never encoded or decoded on the kernel path. When the real package is not
importable, vendored closures get this module instead: ``Struct`` subclasses become dataclasses with the same
field order, defaults, ``frozen`` (hashable) and ``kw_only`` options. Nothing else of msgspec is offered, so a
module that needs more fails to import with the usual error; the real package always wins where installed.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from typing import Any

_MARK = "__astra_standin__"


class Struct:
    def __init_subclass__(cls, frozen: bool = False, kw_only: bool = False, order: bool = False,
                          eq: bool = True, **_ignored: Any) -> None:
        super().__init_subclass__()
        dataclasses.dataclass(frozen=frozen, kw_only=kw_only, order=order, eq=eq)(cls)


def install_if_missing() -> bool:
    """Put the stand-in in ``sys.modules`` when ``import msgspec`` fails; True if it did (or had)."""
    existing = sys.modules.get("msgspec")
    if existing is not None:
        return bool(getattr(existing, _MARK, False))
    try:
        import msgspec  # noqa: F401
        return False
    except ImportError:
        pass
    module = types.ModuleType("msgspec", __doc__)
    module.Struct = Struct  # type: ignore[attr-defined]
    setattr(module, _MARK, True)
    sys.modules["msgspec"] = module
    return True
