"""The private secret behind held-out shapes and seeds.

It lives outside the repository and every run folder (``~/.config/astra-sglang/heldout.key``, mode 0600, made
on first use) or in ``ASTRA_SGLANG_HELDOUT_SECRET``; agents' tools must not be given that path. The cases it
derives exist only in the harness's memory and the worker's pipe.
"""

from __future__ import annotations

import os

from astra_sglang.harness.shared.sandbox import SECRET_ENV as ENV
from astra_sglang.harness.shared.sandbox import secret_path


def heldout_secret() -> bytes:
    env = os.environ.get(ENV)
    if env:
        return env.encode()
    path = secret_path()
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    secret = os.urandom(32).hex().encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first
        return path.read_bytes()
    try:
        os.write(fd, secret)
    finally:
        os.close(fd)
    return secret
