"""Writes to the per-user patch state file: enable/disable, and what ``patches verify`` found on this host."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from astra_sglang.contract.base import write_atomic
from astra_sglang.patches.registry import (
    PatchState,
    VerifyRecord,
    find,
    load_state,
    state_path,
)


def save_state(state: PatchState) -> Path:
    p = state_path()
    write_atomic(p, state.model_dump_json(indent=2) + "\n")
    return p


def set_enabled(patch_id: str, enabled: bool, root: Path | None = None) -> Path:
    find(patch_id, root)  # refuse unknown ids: a typo must not silently do nothing
    st = load_state()
    disabled = set(st.disabled)
    (disabled.discard if enabled else disabled.add)(patch_id)
    st.disabled = sorted(disabled)
    return save_state(st)


def record_verify(patch_id: str, rec: VerifyRecord) -> None:
    st = load_state()
    recs = [r for r in st.verified.get(patch_id, []) if (r.sglang_version, r.arch) != (rec.sglang_version, rec.arch)]
    st.verified[patch_id] = recs + [rec]
    save_state(st)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
