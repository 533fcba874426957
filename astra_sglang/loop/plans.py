"""Whether the planner's K plans are K directions: the same change twice would spend a candidate on nothing.

Two plans are the same direction when their first suggestion has the same title, or when their suggestions
are the same set of changes, compared without case, spacing or punctuation. Numbers stay in: "BLOCK 256" and
"BLOCK 512" are different candidates, which is what a sweep of one direction looks like.
"""

from __future__ import annotations

import re

from astra_sglang.agents.schemas import OptimizationPlan


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


def _keys(plan: OptimizationPlan) -> tuple[str, tuple[str, ...]]:
    first = _norm(plan.suggestions[0].title) if plan.suggestions else ""
    return first, tuple(sorted(_norm(s.title) + "|" + _norm(s.change) for s in plan.suggestions))


def distinct_plans(plans: list[OptimizationPlan], k: int) -> tuple[list[OptimizationPlan], str | None]:
    """The first ``k`` distinct non-empty plans, and what was wrong with the answer (None: nothing)."""
    kept: list[OptimizationPlan] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    seen_sets: dict[tuple[str, ...], int] = {}
    for n, plan in enumerate(plans, 1):
        if not plan.suggestions:
            problems.append(f"plan {n} has no suggestion")
            continue
        first, whole = _keys(plan)
        same = seen.get(first) or seen_sets.get(whole)
        if same is not None:
            problems.append(f"plan {n} is the same direction as plan {same} ({plan.suggestions[0].title!r})")
            continue
        seen[first], seen_sets[whole] = n, n
        kept.append(plan)
    if len(kept) >= k:  # enough distinct ones: extra plans are dropped, repeats among them do not matter
        return kept[:k], None
    if len(plans) < k:
        problems.insert(0, f"{len(plans)} plan(s) given, {k} asked for")
    return kept, "; ".join(problems)
