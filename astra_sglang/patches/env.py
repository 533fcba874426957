"""The one switch read at entry-point load, before anything else is imported (stdlib only, no pydantic)."""

from __future__ import annotations

import os

ENV_SELECT = "ASTRA_SGLANG_PATCHES"
OFF_VALUES = frozenset({"", "0", "off", "none", "false", "no"})
ALL_VALUES = frozenset({"all", "1", "on", "true", "yes"})


def patches_requested() -> bool:
    return os.environ.get(ENV_SELECT, "").strip().lower() not in OFF_VALUES
