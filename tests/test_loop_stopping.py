"""When K-candidate runs stop early, and which of the planner's plans count as distinct directions."""

from __future__ import annotations

from astra_sglang.agents.schemas import OptimizationPlan, Suggestion
from astra_sglang.contract.result import ShapeTiming
from astra_sglang.loop.plans import distinct_plans
from astra_sglang.loop.records import RoundRecord
from astra_sglang.loop.stopping import stop_reason


def _shape(pct: float) -> ShapeTiming:
    return ShapeTiming(dims={"T": 1}, dtype="bfloat16", original_us=2.0, candidate_us=1.0, spread_pct=1.0,
                       speedup=2.0, bytes_moved=1, original_gbps=1.0, candidate_gbps=2.0, original_pct_ceiling=pct / 2,
                       candidate_pct_ceiling=pct)


def _round(i: int, *speeds: float | None, pct: float | None = None, wrong: bool = False) -> RoundRecord:
    cands = [RoundRecord(round=i, candidate=j, status="incorrect" if wrong else "ok", correct=not wrong,
                         geomean_speedup=s, times=[_shape(pct)] * 2 if pct else []) for j, s in enumerate(speeds)]
    return cands[0].model_copy(update={"candidates": cands})


ORIGINAL = RoundRecord(round=0, status="ok", correct=True)


def test_patience_counts_rounds_whose_best_did_not_beat_the_best_so_far():
    rounds = [ORIGINAL, _round(1, 1.2, 1.5), _round(2, 1.4, None), _round(3, 9.0, wrong=True)]
    assert stop_reason(rounds[:2], 1, None) is None
    assert stop_reason(rounds[:3], 2, None) is None
    reason = stop_reason(rounds, 2, None)
    assert reason is not None and "2 round(s) without gain over 1.500x" in reason  # a wrong 9x is no gain
    assert stop_reason([ORIGINAL, _round(1, 0.8)], 1, None) is not None  # slower than the original: no gain


def test_bound_margin_stops_only_within_the_margin_of_the_copy_bound():
    near = [ORIGINAL, _round(1, 1.9, pct=97.5)]
    reason = stop_reason(near, None, 0.03)
    assert reason is not None and "97.5% of the copy bound" in reason and "round 1 candidate 0" in reason
    assert stop_reason(near, None, 0.02) is None
    assert stop_reason([ORIGINAL, _round(1, 1.9, pct=99.0, wrong=True)], None, 0.03) is None  # wrong never counts
    assert stop_reason([ORIGINAL, _round(1, 1.9)], None, 0.5) is None  # no timing: no bound to be near


def _plan(title: str, change: str = "x") -> OptimizationPlan:
    return OptimizationPlan(suggestions=[Suggestion(title=title, change=change, expected_effect="e", risk="r")],
                            lessons_from_history="-", avoid=[])


def test_repeated_or_missing_directions_are_refused_and_extra_ones_dropped():
    kept, problem = distinct_plans([_plan("Tile rows"), _plan("tile  ROWS!"), _plan("Vector loads")], 3)
    assert [p.suggestions[0].title for p in kept] == ["Tile rows", "Vector loads"]
    assert problem == "plan 2 is the same direction as plan 1 ('tile  ROWS!')"
    kept, problem = distinct_plans([_plan("A")], 2)
    assert len(kept) == 1 and problem == "1 plan(s) given, 2 asked for"
    kept, problem = distinct_plans([_plan("A"), _plan("B"), _plan("C")], 2)
    assert [p.suggestions[0].title for p in kept] == ["A", "B"] and problem is None
    kept, problem = distinct_plans([_plan("BLOCK 256"), _plan("BLOCK 512")], 2)
    assert len(kept) == 2 and problem is None  # other numbers are another candidate


def test_a_one_candidate_run_writes_its_records_in_the_old_form():
    """--candidates 1 (the default) leaves the new fields out, so its run folder reads as before the change."""
    import json

    from astra_sglang.loop.records import CheckReport, LoopOptions, StepRecord, WinnerInfo

    rec = json.loads(RoundRecord(round=1, status="ok").model_dump_json())
    assert not {"candidate", "base_candidate", "candidates", "plan_note"} & set(rec) and "base_round" in rec
    assert not {"candidates", "patience", "stop_at_bound_margin"} & set(json.loads(LoopOptions().model_dump_json()))
    step = json.loads(StepRecord(round=1, step="coding", agent="coding", started="t", wall_s=1.0,
                                 status="ok").model_dump_json())
    assert list(step) == ["round", "step", "agent", "attempt", "started", "wall_s", "tokens", "status", "error"]
    assert "candidate" not in WinnerInfo(round=1, reason="r").model_dump() and "ran" not in CheckReport(
        built=True, how="static").model_dump()
    # ...and reads back what K > 1 wrote
    k = RoundRecord(round=2, status="ok", candidate=1, candidates=[RoundRecord(round=2, status="ok", candidate=1)])
    again = RoundRecord.model_validate_json(k.model_dump_json())
    assert again.candidate == 1 and again.entries()[0].candidate == 1
    assert LoopOptions.model_validate_json(LoopOptions(candidates=4, patience=2).model_dump_json()).candidates == 4
