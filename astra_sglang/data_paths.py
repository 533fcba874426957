"""Where the patch registry and the committed extracted folders live, in a checkout and in a wheel alike.

``astra_sglang/_data/{patches,extracted}`` are links to the top-level folders in a checkout (editable installs
see the working tree) and real folders in a wheel, so a plain ``pip install astra-sglang`` into an SGLang
environment carries the patches. Stdlib only: imported inside every SGLang process by the plugin.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "_data"
CACHE_ENV = "ASTRA_SGLANG_CACHE"


def bundled_patches() -> Path:
    return (DATA_DIR / "patches").resolve()


def bundled_extracted() -> Path:
    return (DATA_DIR / "extracted").resolve()


def user_cache() -> Path:
    """A writable place for restored SGLang files and builds when the package folder is read-only."""
    env = os.environ.get(CACHE_ENV)
    xdg = Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser()
    base = Path(env).expanduser() if env else xdg / "astra-sglang"
    return base.resolve()
