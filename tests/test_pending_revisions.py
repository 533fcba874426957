"""pending/ keeps contract revisions that wait for a GPU record as patch files on main (a branch did not outlive its
machine, 2026-12-06). A change on main that the patch no longer applies to would lose the revision again, silently,
until the session that has the GPU: here it fails in CI instead."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PENDING = sorted((REPO / "pending").glob("*.patch"))


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs git and a checkout")
@pytest.mark.parametrize("patch", PENDING, ids=[p.name for p in PENDING])
def test_every_pending_revision_still_applies_to_this_tree(patch: Path) -> None:
    run = subprocess.run(["git", "apply", "--check", str(patch)], cwd=REPO, capture_output=True, text=True, check=False)
    assert run.returncode == 0, f"{patch.name} no longer applies: rebase it (git am, fix, git format-patch):\n" + run.stderr


def test_every_pending_revision_is_described() -> None:
    readme = (REPO / "pending" / "README.md").read_text()
    assert all(p.name in readme for p in PENDING)
