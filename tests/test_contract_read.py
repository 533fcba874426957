"""Both schema readers (op manifest, patch manifest) fail in one line for every malformed file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from astra_sglang.contract.op import ManifestError, load_manifest
from astra_sglang.contract.patch import PatchManifestError, load_patch_manifest

REPO = Path(__file__).resolve().parent.parent
OP = REPO / "extracted" / "merge_state" / "manifest.json"
PATCH = REPO / "patches" / "merge_state" / "merge-state-mr-k1" / "manifest.json"


@pytest.mark.parametrize("load,error,src", [(load_manifest, ManifestError, OP),
                                            (load_patch_manifest, PatchManifestError, PATCH)])
def test_each_malformed_file_is_one_line(tmp_path, load, error, src):
    raw = json.loads(src.read_text())
    cases = {
        "not json": "{",
        "a list": "[1, 2]",
        "other version": json.dumps({**raw, "schema_version": 99}),
        "missing field": json.dumps({k: v for k, v in raw.items() if k != "signature" and k != "source"}),
    }
    for what, text in cases.items():
        shutil.rmtree(tmp_path / "f", ignore_errors=True)
        (tmp_path / "f").mkdir()
        (tmp_path / "f" / "manifest.json").write_text(text)
        with pytest.raises(error) as e:
            load(tmp_path / "f")
        msg = str(e.value)
        assert "\n" not in msg and "https://" not in msg, (what, msg)
    assert "missing" in msg and "field '" in msg, msg
