"""The one base model of every on-disk schema, and the two file primitives they all need (stdlib only).

``extra="forbid"``: a misspelt or stale field in a hand-edited manifest is an error naming the field, not a
value silently ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


def validation_reason(e: ValidationError, limit: int = 5) -> str:
    """pydantic's errors as one line ("field 'source' missing; field 'guard.dtypes' wrong type (a list)"):
    its own message is several lines with documentation URLs, which buries the reason in a server's log."""
    parts = []
    for err in e.errors()[:limit]:
        loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
        kind = err["type"]
        if kind == "missing":
            parts.append(f"field '{loc}' missing")
        elif kind == "extra_forbidden":
            parts.append(f"field '{loc}' not allowed")
        elif kind.endswith("_type") or kind.endswith("_parsing"):
            want = err["msg"].removeprefix("Input should be ").removeprefix("a valid ")
            parts.append(f"field '{loc}' wrong type (expected {want})")
        else:
            parts.append(f"field '{loc}': {err['msg']}")
    more = e.error_count() - limit
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def fit_dim(value: int, lo: int, hi: int | None, multiple_of: int) -> int:
    """``value`` moved into [lo, hi] on a multiple of ``multiple_of`` (rounded up, down past ``hi``): one rule for
    the harness's invented shapes and for the check shapes a patch's guard covers."""
    m = max(1, multiple_of)
    value = -(-max(lo, value) // m) * m
    if hi is not None and value > hi:
        value = hi // m * m
    return max(value, m)


def drop_unset(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    """A serialized model without the named keys where they hold nothing (None or empty): a field added later is
    written only when set, so files written before it existed keep the bytes their SHA-256 pins."""
    for key in keys:
        if data.get(key) is None or data.get(key) in ([], {}):
            data.pop(key, None)
    return data


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_text(text: str) -> str:
    return sha256_bytes(text.encode())


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pid_alive(pid: int) -> bool:
    """Whether the process that wrote a record (a run's lock, a server's status) still runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


def umask() -> int:
    """This process's umask, read without changing it where Linux tells it (``/proc/self/status``)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore
    os.umask(mask)
    return mask


def make_temp_dir(prefix: str, parent: Path) -> Path:
    """A fresh folder under ``parent`` with the mode a plain ``mkdir`` would give it: it is renamed into place (an
    op folder, a restored copy in a shared cache), and mkdtemp's 0700 would then lock out a serving account."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    path.chmod(0o777 & ~umask())
    return path


def write_atomic(path: Path, text: str) -> None:
    """Readers (a resumed run, a second server process) see the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a failed write leaves the old file and no litter
        raise


M = TypeVar("M", bound=BaseModel)


def read_versioned(path: Path, model: type[M], version: int, error: type[Exception], what: str) -> M:
    """Read a schema file: valid JSON, the schema version this code knows, then the model; one line for each
    way it can fail (no pydantic dump), as ``error``. Readers refuse a version they do not know, never guess."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise error(f"{path}: not valid JSON ({e})") from None
    found = raw.get("schema_version") if isinstance(raw, dict) else None
    if found != version:
        raise error(f"{path}: schema_version {found!r}, this astra-sglang reads {version}")
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        raise error(f"{path}: invalid {what}: {validation_reason(e)}") from None
