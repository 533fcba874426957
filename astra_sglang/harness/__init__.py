"""The evaluation harness: build, check and time a candidate kernel against the extracted original.

Importing this package stays light (pydantic and the stdlib); torch and triton are imported by the worker
processes, and by ``evaluate`` only to ask whether a GPU is visible.
"""

from astra_sglang.harness.config import EvalConfig
from astra_sglang.harness.evaluate import evaluate, evaluate_many
from astra_sglang.harness.result import EvalResult

__all__ = ["EvalConfig", "EvalResult", "evaluate", "evaluate_many"]
