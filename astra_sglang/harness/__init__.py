"""The evaluation harness: build, check and time a candidate kernel against the extracted original.

Its inside follows the trust boundary (docs/harness.md): ``parent`` runs in the user's process and never runs
candidate code, ``judge`` is the trusted checker process that decides every verdict, ``worker`` is the only
process that imports a candidate, and ``shared`` is what the three speak (protocol, tensors, suite, timing,
child processes). The names below are what the rest of astra-sglang uses; they load on first use, so the
judge and worker processes, which import only ``shared``, pay for nothing else.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from astra_sglang.harness.parent.contract_validation import validate_contract, validation_config
    from astra_sglang.harness.parent.evaluate import evaluate, evaluate_many, resolve_device
    from astra_sglang.harness.parent.report import print_result
    from astra_sglang.harness.parent.screen import screen_source
    from astra_sglang.harness.parent.tune_baseline import sweep_baseline

_EXPORTS = {
    "evaluate": "parent.evaluate", "evaluate_many": "parent.evaluate", "resolve_device": "parent.evaluate",
    "validate_contract": "parent.contract_validation", "validation_config": "parent.contract_validation",
    "sweep_baseline": "parent.tune_baseline", "print_result": "parent.report", "screen_source": "parent.screen",
}

if not TYPE_CHECKING:  # hidden from mypy, which then checks every import of this package against the names above

    def __getattr__(name: str) -> Any:
        where = _EXPORTS.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{__name__}.{where}"), name)


__all__ = ["evaluate", "evaluate_many", "print_result", "resolve_device", "screen_source", "sweep_baseline",
           "validate_contract", "validation_config"]
