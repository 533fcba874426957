"""The catalog's reference/inputs/adapter functions write the op folders' committed files byte for byte.

Those files are pinned by SHA-256 in each manifest and their validation records were measured on an H200: a
catalog edit that changes one character of them must fail here, not in a re-extraction.
"""

from __future__ import annotations

import pkgutil
from pathlib import Path

import pytest

from astra_sglang.extract import catalog
from astra_sglang.extract.catalog import ops
from astra_sglang.extract.catalog.source_text import FileText

EXTRACTED = Path(__file__).resolve().parent.parent / "extracted"
_COMMITTED = [e for e in catalog.entries() if (EXTRACTED / e.short_name).is_dir()]
_FILES = ("reference", "inputs", "adapter")


def test_every_entry_has_a_committed_folder():
    assert len(_COMMITTED) == len(catalog.entries()) > 40


@pytest.mark.parametrize("entry", _COMMITTED, ids=lambda e: e.short_name)
def test_written_files_equal_the_committed_bytes(entry):
    for name in _FILES:
        source = getattr(entry, name)
        path = EXTRACTED / entry.short_name / f"{name}.py"
        if source is None:
            assert not path.exists(), f"{path} is committed but the entry has no {name}"
            continue
        assert source.text().encode() == path.read_bytes(), f"{entry.short_name}/{name}.py"


def _reference() -> None:
    pass


def test_a_changed_character_is_caught():
    written = FileText(doc="Reference.", imports=("import torch",), functions=(_reference,)).text()
    assert written == '"""Reference."""\n\nimport torch\n\n\ndef _reference() -> None:\n    pass\n'
    assert FileText(doc="Reference!", imports=("import torch",), functions=(_reference,)).text() != written


def test_a_drafted_text_is_written_as_the_model_wrote_it():
    text = "def reference(**args):\n    return {}\n"
    assert FileText.verbatim(text).text() == text
    with pytest.raises(ValueError, match="not both"):
        FileText(given=text, functions=(_reference,))


def test_every_op_module_is_in_the_catalog_under_its_own_name():
    modules = {m.name for m in pkgutil.iter_modules(ops.__path__)}
    assert modules == set(catalog.OPS)
    assert [e.short_name for e in catalog.entries()] == list(catalog.OPS)
