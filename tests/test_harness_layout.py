"""The harness's inside follows its trust boundary (docs/harness.md): the judge and the worker processes load
nothing of the parent's side, and the one ABBA loop orders every timed batch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from astra_sglang.harness.shared import timing


def _loaded_by(module: str) -> list[str]:
    code = (f"import sys, json; import {module}; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('astra_sglang'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("process", ["astra_sglang.harness.judge.process", "astra_sglang.harness.worker.process"])
def test_the_judge_and_the_worker_load_nothing_of_the_parent(process):
    loaded = _loaded_by(process)
    assert process in loaded
    assert not [m for m in loaded if m.startswith("astra_sglang.harness.parent")], loaded
    assert not [m for m in loaded if m.startswith(("astra_sglang.agents", "astra_sglang.loop", "astra_sglang.cli"))]


def test_the_worker_loads_no_judge_code():
    assert not [m for m in _loaded_by("astra_sglang.harness.worker.process")
                if m.startswith("astra_sglang.harness.judge")]


def test_interleave_alternates_sides_by_batch_and_covers_every_replay():
    calls: list[tuple[str, int]] = []
    timing.interleave([lambda k: calls.append(("A", k)), lambda k: calls.append(("B", k))], rep=60, batch=25)
    assert calls == [("A", 25), ("B", 25), ("B", 25), ("A", 25), ("A", 10), ("B", 10)]


def test_time_interleaved_gives_each_launch_rep_samples_in_abba_order():
    order: list[str] = []
    clock = timing.clock_for("cpu")
    samples, method = timing.time_interleaved(clock, [lambda: order.append("a"), lambda: order.append("b")],
                                              warmup=0, rep=4)
    assert [len(s.us) for s in samples] == [4, 4]
    assert "".join(order)[-8:] == "abbaabba"  # after the captures (HostClock runs each once): A B, B A, ...
    assert method.startswith("host-timed")
