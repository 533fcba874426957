"""Agent instructions live in Markdown files next to this module, so they can be read and reviewed as text."""

from __future__ import annotations

from functools import cache
from importlib import resources

ROLES = ("testing", "profiling", "planning", "coding", "single", "contract")
ADDENDA = ("planning_set", "single_set")  # appended to a role's prompt when a round codes K > 1 candidates


@cache
def load_prompt(role: str) -> str:
    if role not in ROLES + ADDENDA:
        raise ValueError(f"no prompt for role {role!r}; roles: {ROLES}")
    return (resources.files("astra_sglang.agents") / "prompts" / f"{role}.md").read_text()
