"""What a test needs from the machine, decided in one place.

- ``@pytest.mark.gpu``: skipped unless torch sees a CUDA device (the H200 runs ``pytest -m gpu``).
- ``@pytest.mark.nvcc``: skipped unless nvcc (found the way the loader finds it) and ninja are there.
- ``restored_op(name)``: the committed ``extracted/<name>`` folder with SGLang's git-ignored files restored.
  Locally a missing restore is a skip; under ``CI=true`` it is a failure, because CI restores them itself and a
  test that silently skips there proves nothing.
- Under ``CI=true`` a test skipped by ``pytest.importorskip`` of a package ``scripts/setup_env.sh`` installs
  (sglang, torch, triton, matplotlib, openai-agents) fails too: there the skip means the set-up broke.
- ``measurements``: where GPU acceptance tests write their JSON (``docs/measurements/``).
- Nothing is written under the user's home: the patch status records (of the plugin's test children and fake
  patches, which ``patches status`` would show as a server's), the patch state file and the held-out secret
  go to a temporary folder for the whole session (``_user_paths_in_tmp``, ``USER_PATHS``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Generator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
EXTRACTED = REPO / "extracted"
MEASUREMENTS = REPO / "docs" / "measurements"
RESTORE_HINT = "run `astra-sglang extract --restore`"
CI_REQUIRED = ("sglang", "torch", "triton", "matplotlib", "agents")  # what scripts/setup_env.sh installs
_IMPORT_SKIP = re.compile(r"could not import '([\w.]+)'")


# Per-user paths the suite would write -> where they go instead: status records (the user cache's status/),
# the `patches enable/disable` state and the held-out key (both under ~/.config; the key stays a file, as for a
# user: in the environment every candidate's worker would inherit it). The user cache itself is left alone:
# ASTRA_SGLANG_CACHE also moves the loader's builds out of the op folders, where tests of the loader look for
# them, and the suite writes nothing else there (restored files only for an op folder without them).
USER_PATHS = {"ASTRA_SGLANG_STATUS_DIR": "status", "ASTRA_SGLANG_STATE_FILE": "patches-state.json",
              "XDG_CONFIG_HOME": "config"}


@pytest.fixture(scope="session", autouse=True)
def _user_paths_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> Generator[Path, None, None]:
    """The session's stand-in for the user's folders; children (servers, workers) inherit it by the environment."""
    base = tmp_path_factory.mktemp("user")
    with pytest.MonkeyPatch.context() as mp:
        for env, name in USER_PATHS.items():
            mp.setenv(env, str(base / name))
        yield base


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _no_cuda_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "needs a CUDA GPU (torch is not installed)"
    if not torch.cuda.is_available():
        return "needs a CUDA GPU (run on the H200: pytest -m gpu)"
    return None


def _no_toolchain_reason() -> str | None:
    from astra_sglang.loader import toolchain

    nvcc = toolchain.cuda_home() / "bin" / "nvcc"
    if not nvcc.exists():
        return f"needs nvcc (not at {nvcc}; set CUDA_HOME)"
    if shutil.which("ninja") is None:
        return "needs ninja on PATH (`pip install ninja`)"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    checks = {"gpu": _no_cuda_reason, "nvcc": _no_toolchain_reason}
    reasons: dict[str, str | None] = {}
    for item in items:
        for marker, check in checks.items():
            if item.get_closest_marker(marker) is None:
                continue
            if marker not in reasons:
                reasons[marker] = check()
            reason = reasons[marker]
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=reason))


def _missing_in_ci(report: pytest.CollectReport | pytest.TestReport) -> str | None:
    """The importorskip reason when, under CI, it names a package the CI set-up installs."""
    if not (report.skipped and _in_ci()):
        return None
    longrepr = report.longrepr
    reason = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)
    found = _IMPORT_SKIP.search(reason)
    if found is None or found.group(1).split(".")[0] not in CI_REQUIRED:
        return None
    return f"CI=true: {reason} (scripts/setup_env.sh installs it: the set-up is broken)"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    reason = _missing_in_ci(report)
    if reason is not None:
        report.outcome, report.longrepr = "failed", reason


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    reason = _missing_in_ci(report)
    if reason is not None:
        report.outcome, report.longrepr = "failed", reason


def restore_problem(op: Path) -> str | None:
    """Why ``op`` cannot be used as SGLang's extracted kernel here, or None when every file is in place."""
    from astra_sglang.contract.op import load_manifest

    if not (op / "manifest.json").is_file():
        return f"{op.relative_to(REPO)}/manifest.json is missing (a committed file: is the checkout complete?)"
    missing = [f.path for f in load_manifest(op).files if not (op / f.path).exists()]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        return f"{op.relative_to(REPO)} lacks SGLang's file {missing[0]}{more}: {RESTORE_HINT}"
    return None


def _restored(name: str, *, stand_in: bool) -> Path | None:
    op = EXTRACTED / name
    problem = restore_problem(op)
    if problem is None:
        return op
    if _in_ci():
        pytest.fail(f"CI=true: {problem}", pytrace=False)
    if stand_in:
        return None
    pytest.skip(problem)


@pytest.fixture(scope="session")
def restored_op() -> Callable[[str], Path]:
    """``restored_op("merge_state")`` -> ``extracted/merge_state``, with SGLang's files checked present."""

    def get(name: str) -> Path:
        op = _restored(name, stand_in=False)
        assert op is not None
        return op

    return get


@pytest.fixture
def interpreted_merge_state(restored_op: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch) -> Any:
    """merge_state's real original, restored, under TRITON_INTERPRET=1: the CPU path of a patch test (a GPU host
    runs the GPU tests instead). Returns torch."""
    restored_op("merge_state")
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("the CPU path")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    return torch


@pytest.fixture(scope="session")
def restored_op_or_none() -> Callable[[str], Path | None]:
    """Like ``restored_op``, but None instead of a skip where a test has its own stand-in op; still a failure
    under CI=true, so CI always runs SGLang's real kernel."""
    return lambda name: _restored(name, stand_in=True)


def measurement_path(root: Path, name: str, device: str) -> Path:
    """Named for the GPU that measured it, file and label alike: the tests' "h200_" names came back from H100s as
    h200_*.json (2026-12-07), and the file's own label still said h200 on an H100 (2026-12-08)."""
    gpu = next((g for g in ("h100", "h200", "b200", "a100") if g in device.lower()), "gpu" if device != "cpu" else "cpu")
    return root / f"{gpu}_{name.removeprefix('h200_')}.json" if name.startswith("h200_") else root / f"{name}.json"


@pytest.fixture(scope="session")
def measurements() -> Callable[[str, Any], Path]:
    """``measurements("h200_harness_self", data)`` writes docs/measurements/h200_harness_self.json on an H200
    (h100_harness_self.json on an H100: the file says which GPU measured it).

    GPU acceptance tests keep what they measured where the measurement index (docs/measurements/README.md)
    points; ``ASTRA_SGLANG_MEASUREMENTS`` redirects it (e.g. to $OUT on the GPU host, to bring it back).
    """
    root = Path(os.environ.get("ASTRA_SGLANG_MEASUREMENTS") or MEASUREMENTS)

    def write(name: str, data: Any) -> Path:
        import torch

        device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
        root.mkdir(parents=True, exist_ok=True)
        path = measurement_path(root, name, device)
        doc = {"written_by": path.stem, "device": device, "torch": torch.__version__,
               "utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "data": data}
        path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
        return path

    return write


@pytest.fixture(scope="session")
def validated_merge_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of extracted/merge_state with a passing CPU validation: what `optimize` needs to start."""
    from loop_support import merge_state_dir

    return merge_state_dir(tmp_path_factory.getbasetemp())
