"""What each patch is doing in this process: its state, why, and how many calls it and the original served.

Counters are plain Python ints bumped on the host: reading them never synchronises the GPU, and bumping them
is legal inside CUDA-graph capture (a replayed graph does not bump them: replays run no Python, so a call made
during capture is counted once, in ``captured_by_*`` as well). Warnings go through the ``astra_sglang.patches``
logger, at most one line per patch per process. ``status_file`` writes all of it out for ``patches status``.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Literal

logger = logging.getLogger("astra_sglang.patches")

State = Literal["pending", "active", "failed", "inapplicable", "disabled"]  # contract.status.PatchState says why


@dataclass
class PatchStatus:
    patch_id: str
    op: str
    state: State = "pending"
    reason: str = ""
    served_by_patch: int = 0
    served_by_original: int = 0
    passed_on: int = 0  # calls handed to the patch of the same op stacked behind this one (a retune)
    captured_by_patch: int = 0
    captured_by_original: int = 0
    first_call_check: str = ""  # "" = not run; "passed ..." / "failed: ..." / "not applicable: ..."
    fallbacks: list[str] = field(default_factory=list)  # failures after the patch had been active
    targets: tuple[str, ...] = ()


_lock = threading.Lock()
_status: dict[str, PatchStatus] = {}
_warned: set[str] = set()


def get(patch_id: str, op: str = "") -> PatchStatus:
    with _lock:
        st = _status.get(patch_id)
        if st is None:
            st = _status[patch_id] = PatchStatus(patch_id=patch_id, op=op)
        return st


def fail(patch_id: str, reason: str, op: str = "", state: State = "failed") -> None:
    """Mark the patch failed (the original serves from now on) and warn once, naming patch and reason.

    ``state="inapplicable"`` for a device the patch was never measured on: the same fallback and warning, but
    no failed check (``validate`` must not fail an H100 server over a patch measured on H200s only).

    The reason is made one line of at most 400 characters: an exception's message can span a page (sgl_kernel's
    "could not load common_ops" is 20 lines), and one warning must stay one line in SGLang's log."""
    reason = " ".join(reason.split())
    if len(reason) > 400:
        reason = reason[:399] + "…"
    st = get(patch_id, op)
    if st.state == "active":
        st.fallbacks.append(reason)
    st.state = state
    st.reason = reason
    with _lock:
        if patch_id in _warned:
            return
        _warned.add(patch_id)
    logger.warning("astra-sglang patch %s not used, SGLang's original serves instead: %s", patch_id, reason)


def counters() -> dict[str, dict[str, int]]:
    """``{patch_id: {"patch": calls served by the patch, "original": calls it sent to the original}}``."""
    with _lock:
        return {pid: {"patch": s.served_by_patch, "original": s.served_by_original} for pid, s in _status.items()}


def statuses() -> dict[str, PatchStatus]:
    with _lock:
        return dict(_status)


def reset(patch_id: str | None = None) -> None:
    """Forget state (tests, or a process that reinstalls patches)."""
    with _lock:
        if patch_id is None:
            _status.clear()
            _warned.clear()
        else:
            _status.pop(patch_id, None)
            _warned.discard(patch_id)
