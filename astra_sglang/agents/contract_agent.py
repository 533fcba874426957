"""The Contract agent: drafts an op's contract (a ``DraftContract``) from SGLang's own sources.

Its instructions carry the rules of a contract (prompts/contract.md) plus, rendered at run time, the model
configs shapes come from (extract/shapes.py) and the default tolerances with their justification
(extract/catalog/base.py), so the prompt never disagrees with the code that judges the draft.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agents import Agent, AgentOutputSchema, FunctionTool, function_tool
from agents.models.interface import Model

from astra_sglang.agents.prompts import load_prompt
from astra_sglang.errors import AstraError
from astra_sglang.extract.draft import DraftContract


def _model_configs() -> str:
    from astra_sglang.extract import shapes

    lines = ["## Model configs (published numbers; TP splits the heads and the MLP width, not the hidden size)"]
    for name, value in vars(shapes).items():
        if isinstance(value, tuple) and value and all(dataclasses.is_dataclass(v) for v in value):
            lines.append(f"### {name}")
            for cfg in value:
                fields = ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(cfg).items())
                lines.append(f"- {fields}")
    lines.append(f"TP sizes {shapes.TP_SIZES}; decode token counts {shapes.DECODE_T}; prefill {shapes.PREFILL_T}.")
    return "\n".join(lines)


def _tolerances() -> str:
    import inspect

    from astra_sglang.extract.catalog import base

    why = [ln.strip().lstrip("# ") for ln in inspect.getsource(base).splitlines() if ln.startswith("# ")]
    rows = [f"- {d}: atol={t.atol}, rtol={t.rtol}" for d, t in base.DEFAULT_TOLERANCES.items()]
    return "## Default tolerances\n" + "\n".join(rows) + "\nWhy: " + " ".join(why)


def instructions() -> str:
    return load_prompt("contract").replace("{context}", _model_configs() + "\n\n" + _tolerances())


def read_file_tool() -> FunctionTool:
    from astra_sglang.extract.draft_context import read_sglang_file

    @function_tool(name_override="read_sglang_file")
    def read_sglang_file_tool(path: str) -> str:
        """Read one file of the installed sglang package (e.g. 'srt/layers/sampler.py' or
        'kernels/jit/csrc/elementwise/activation.cuh'); files outside the package are refused.

        Args:
            path: the file's path inside the sglang package.
        """
        try:
            return read_sglang_file(path)
        except AstraError as e:
            return f"error: {e}"

    return read_sglang_file_tool


def make_contract_agent(model: Model) -> Agent[Any]:
    # Not strict: the draft has free-form maps (dims per shape, tolerances per dtype) that strict JSON schema
    # cannot express; the pydantic model still validates every reply.
    return Agent(name="contract", instructions=instructions(), model=model, tools=[read_file_tool()],
                 output_type=AgentOutputSchema(DraftContract, strict_json_schema=False))
