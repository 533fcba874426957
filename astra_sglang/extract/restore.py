"""``extract --restore``: refill every committed op folder under a root with the files it pins."""

from __future__ import annotations

from pathlib import Path

from astra_sglang.contract.op import MANIFEST_NAME
from astra_sglang.contract.restore import Restored, restore_folder
from astra_sglang.errors import AstraError


def restore_all(root: Path) -> list[Restored]:
    folders = sorted(p.parent for p in Path(root).glob(f"*/{MANIFEST_NAME}"))
    if not folders:
        raise AstraError(f"no extracted op folders under {root}")
    return [restore_folder(d) for d in folders]
