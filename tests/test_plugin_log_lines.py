"""What the plugin says in SGLang's log before any call: one line for each thing an operator must know.

``plugin.load()`` is what SGLang's ``load_plugins()`` calls (tests/test_plugin_sglang.py runs it through SGLang);
here it runs in this process on registries that install nothing, so no SGLang hook is touched.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from patch_support import copy_as_regular

from astra_sglang.patches import plugin, status, status_file

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "patches" / "silu_and_mul" / "triton-silu-and-mul-v1"


@pytest.fixture
def plugin_env(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SGLANG_STATUS_DIR", str(tmp_path / "status"))
    monkeypatch.setenv("ASTRA_SGLANG_STATE_FILE", str(tmp_path / "state.json"))
    monkeypatch.delenv("ASTRA_SGLANG_PATCHES", raising=False)
    status.reset()
    yield monkeypatch
    status_file.stop()
    status.reset()


def _lines(caplog) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name.startswith("astra_sglang")]


def test_patches_off_is_one_info_line(plugin_env, caplog):
    caplog.set_level(logging.INFO, logger="astra_sglang")
    plugin.load()
    assert _lines(caplog) == [(logging.INFO, "astra-sglang: patches off (set ASTRA_SGLANG_PATCHES)")]


def test_missing_patch_folder_is_one_warning_naming_it(plugin_env, caplog, capsys):
    plugin_env.setenv("ASTRA_SGLANG_PATCHES", "all")
    plugin_env.setenv("ASTRA_SGLANG_PATCHES_DIR", "/nonexistent")
    caplog.set_level(logging.INFO, logger="astra_sglang")
    plugin.load()
    warnings = [m for lvl, m in _lines(caplog) if lvl >= logging.WARNING]
    assert warnings == ["astra-sglang: patch folder ASTRA_SGLANG_PATCHES_DIR=/nonexistent does not exist; "
                        "no patches installed, SGLang's originals serve"]
    from astra_sglang.cli.main import main

    assert main(["patches", "list"]) == 2                     # the CLI says the same, not "no patches"
    assert capsys.readouterr().err.strip() == ("astra-sglang: error: patch folder /nonexistent does not exist "
                                               "(ASTRA_SGLANG_PATCHES_DIR='/nonexistent')")


def test_manifest_with_missing_and_mistyped_fields_is_one_warning_line(plugin_env, caplog, tmp_path):
    root = tmp_path / "patches"
    d = root / "silu_and_mul" / "broken"
    copy_as_regular(SHIPPED, d)
    raw = json.loads((d / "manifest.json").read_text())
    del raw["source"]
    raw["guard"]["dtypes"] = "bfloat16"
    (d / "manifest.json").write_text(json.dumps(raw))
    plugin_env.setenv("ASTRA_SGLANG_PATCHES", "all")
    plugin_env.setenv("ASTRA_SGLANG_PATCHES_DIR", str(root))
    caplog.set_level(logging.INFO, logger="astra_sglang")
    plugin.load()
    warnings = [m for lvl, m in _lines(caplog) if lvl >= logging.WARNING]
    assert len(warnings) == 1, warnings
    w = warnings[0]
    assert "\n" not in w and "http" not in w, w
    assert w.endswith("invalid patch manifest: field 'source' missing; field 'guard.dtypes' wrong type (expected list)")
    assert w.startswith("astra-sglang patch broken not used")
    infos = [m for lvl, m in _lines(caplog) if lvl == logging.INFO]
    assert infos == ["astra-sglang: patches installed (checked at first call): none; refused: broken "
                     f"({d / 'manifest.json'}: invalid patch manifest: field 'source' missing; field 'guard.dtypes' "
                     "wrong type (expected list))"]


def test_a_target_whose_import_fails_with_a_page_of_text_is_one_short_warning(plugin_env, caplog, tmp_path):
    """sgl_kernel's import error (no GPU, or a torch it was not built for) is 20 lines; the log gets one."""
    from astra_sglang.patches import install

    root = tmp_path / "patches"
    copy_as_regular(SHIPPED, root / "silu_and_mul" / "triton-silu-and-mul-v1")
    page = "\n[sgl_kernel] CRITICAL: Could not load any common_ops library!\n\n" + "\n".join(
        f"- attempt {i}: undefined symbol _ZN3c104cuda19CUDAErrorLogCaptureC1Ev" for i in range(30))

    def boom(target: str) -> object:
        raise ImportError(page)

    plugin_env.setattr(install, "resolve_target", boom)
    plugin_env.setenv("ASTRA_SGLANG_PATCHES", "triton-silu-and-mul-v1")
    plugin_env.setenv("ASTRA_SGLANG_PATCHES_DIR", str(root))
    caplog.set_level(logging.INFO, logger="astra_sglang")
    plugin.load()
    warnings = [m for lvl, m in _lines(caplog) if lvl >= logging.WARNING]
    assert len(warnings) == 1 and "\n" not in warnings[0] and len(warnings[0]) < 520, warnings
    assert "cannot prepare (ImportError: [sgl_kernel] CRITICAL: Could not load any common_ops library!" in warnings[0]
    assert status.get("triton-silu-and-mul-v1").state == "failed"


@pytest.mark.parametrize("before", ["", "import logging; logging.basicConfig(level=logging.WARNING)"],
                         ids=["nothing-configured", "root-at-warning"])
def test_the_start_up_line_reaches_stderr_before_sglang_applies_its_log_level(tmp_path, before):
    """SGLang calls load_plugins() before it applies --log-level; its imports leave the root logger at WARNING.
    The INFO line was dropped there: a real SGLang 0.5.23 server's log had the plugin's warnings, not this line."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, ASTRA_SGLANG_PATCHES="off")
    code = f"{before}\nfrom astra_sglang.patches import plugin; plugin.load()"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    lines = [x for x in r.stderr.splitlines() if "astra-sglang" in x]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("[") and lines[0].endswith("] astra-sglang: patches off (set ASTRA_SGLANG_PATCHES)")
