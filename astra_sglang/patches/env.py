"""The one switch read at entry-point load, before anything else is imported (stdlib only, no pydantic)."""

from __future__ import annotations

import os

ENV_SELECT = "ASTRA_SGLANG_PATCHES"
OFF_VALUES = frozenset({"", "0", "off", "none", "false", "no"})
ALL_VALUES = frozenset({"all", "1", "on", "true", "yes"})


def patches_requested() -> bool:
    return os.environ.get(ENV_SELECT, "").strip().lower() not in OFF_VALUES


ENV_PLACEBO = "ASTRA_SGLANG_PLACEBO"


def placebo_requested() -> bool:
    """The e2e instrument's placebo arm: the selected patches' hooks are installed and reached, but SGLang's
    original serves every call, so what the hooks themselves cost is measured apart from what the kernels gain."""
    return os.environ.get(ENV_PLACEBO, "").strip().lower() not in OFF_VALUES
