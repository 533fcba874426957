"""``e2e --in-process``: the arms of an e2e run inside ONE process of SGLang's own forward, switched by graph recapture.

Separate processes with identical kernels differ by 3-6% in decode step (clocks, allocator, memory placement), so
the cross-process A/B needs ~70 rounds for +-1% at batch 128 (2026-12-04). Inside one process that noise is held
fixed: the same weights, pools and clocks serve every arm. What a patch changes in a decode step is which kernel
the captured CUDA graphs replay, so an arm is a graph capture:

- A and C: every active patch set to ``disabled`` (its hook stays installed; SGLang's original serves, and is what
  the recapture puts into the graphs). C is the same condition as A, run as its own arm: C/A is the placebo, the
  in-process drift and order effect, and must hold 1.
- B: the patches active again; the recapture puts their kernels into the graphs.

Before each arm-run the decode graphs are captured anew (``ModelRunner.init_decode_cuda_graph``), in every arm
alike, then one_batch's own ``latency_test_run_once`` measures prefill and the decode steps. The arms rotate each
round (A B C, B C A, C A B). Each arm-run writes one JSON line to ``$ASTRA_E2E_INPROCESS_OUT``: its round, arm,
position, one_batch's measurement and, per patch, the calls served by the patch and by the original during it,
and those made inside the recapture (what the timed replays run): B's graphs must hold patch calls, A's and C's
none. What this cannot see, the cost of the hooks being installed at all (A has them too), is what the
cross-process e2e's placebo measures.

Run by ``astra-sglang e2e --in-process`` as ``python -m astra_sglang.e2e.inprocess_child <one_batch arguments>``.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from astra_sglang.e2e.runner import arm_order
from astra_sglang.profile.chunked_prefill import GROUPS_ATTR, chunk_prefill, tokens_from_env

ENV_ROUNDS = "ASTRA_E2E_INPROCESS_ROUNDS"
ENV_OUT = "ASTRA_E2E_INPROCESS_OUT"
ENV_DEADLINE = "ASTRA_E2E_INPROCESS_DEADLINE"  # epoch seconds by which the last arm-run must have ended
COUNTED = ("served_by_patch", "served_by_original", "passed_on", "captured_by_patch", "captured_by_original")


def _counts() -> dict[str, dict[str, int | str]]:
    from astra_sglang.patches import status

    return {pid: {"state": s.state, **{k: getattr(s, k) for k in COUNTED}} for pid, s in status.statuses().items()}


class InProcessAB:
    """The loop around one_batch's per-shape measurement; ``real`` is one_batch's ``latency_test_run_once``.

    one_batch measures its batch shapes one after another, so all rounds of one shape run before the next shape
    starts. With a ``deadline`` (epoch seconds) each of the ``shapes`` shapes gets an equal share of the time left
    when it starts (what an earlier shape left unused included) and stops after the last whole round that fits it:
    a run that would have been cut ends in time with rounds at every shape, not all of the first and few of the
    last (H100, 2026-12-07: 8 rounds at batch 32 and 3 at batch 128 when the call's limit struck)."""

    def __init__(self, real: Callable[..., Any], rounds: int, out: Path, deadline: float | None = None,
                 shapes: int = 1, clock: Callable[[], float] = time.time):
        self.real = real
        self.rounds = rounds
        self.out = out
        self.deadline = deadline
        self.shapes = max(1, shapes)
        self.clock = clock
        self.calls = 0
        self.active: list[str] = []

    def _out_of_time(self, done: int, started: float, share: float) -> bool:
        """Whether one more round (as long as the mean of the ``done`` rounds so far) would pass this shape's share."""
        spent = self.clock() - started
        return spent + spent / done > share

    def _prepare(self) -> None:
        """Every installed patch built and checked now, outside any capture, so B's recapture serves it."""
        from astra_sglang.patches import install, status

        install.activate()
        self.active = sorted(pid for pid, s in status.statuses().items() if s.state == "active")

    def _set_arm(self, arm: str) -> None:
        from astra_sglang.patches import status

        for pid in self.active:
            status.get(pid).state = "active" if arm == "B" else "disabled"

    @staticmethod
    def recapture(bench_runner: Any) -> bool:
        """The decode graphs captured again, now; False when this forward runs decode without graphs."""
        runner = getattr(bench_runner, "torch_runner", bench_runner)
        if getattr(runner, "decode_cuda_graph_runner", None) is None:
            return False
        runner.decode_cuda_graph_runner = None
        gc.collect()  # the old graphs (and their pool's hold) go before the new capture
        runner.init_decode_cuda_graph()
        return True

    def __call__(self, run_name: Any, model_runner: Any, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == 1:  # one_batch's warm-up (cold caches): outside the statistics
            ret = self.real(run_name, model_runner, *args, **kwargs)
            self._prepare()
            return ret
        ret = None
        started = self.clock()
        left_shapes = max(1, self.shapes - (self.calls - 2))  # this shape and those after it
        share = (self.deadline - started) / left_shapes if self.deadline is not None else float("inf")
        try:
            for r in range(1, self.rounds + 1):
                if r > 1 and self._out_of_time(r - 1, started, share):
                    print(f"e2e in-process: batch shape {self.calls - 1} of {self.shapes}: {r - 1} of {self.rounds} "
                          f"rounds in its share of the time left ({share:.0f} s)", file=sys.stderr, flush=True)
                    break
                for pos, arm in enumerate(arm_order(r)):
                    self._set_arm(arm)
                    before = _counts()  # before the recapture: its calls are what the timed replays run
                    graphs = self.recapture(model_runner)
                    t0 = time.monotonic()
                    ret = self.real(run_name, model_runner, *args, **kwargs)
                    after = _counts()
                    if ret is None:  # one_batch skipped the shape (batch too large for the pool)
                        return None
                    line = {"round": r, "arm": arm, "position": pos, "seconds": time.monotonic() - t0,
                            "graphs": graphs, "result": ret,
                            "prefill_groups": getattr(model_runner, GROUPS_ATTR, None),
                            "patches": [{"patch_id": pid, "state": now["state"],
                                         **{k: int(now[k]) - int(before.get(pid, {}).get(k, 0)) for k in COUNTED}}
                                        for pid, now in sorted(after.items())]}
                    with open(self.out, "a") as f:
                        f.write(json.dumps(line, default=float) + "\n")
        finally:
            self._set_arm("B")  # as loaded: the patches serve again
        return ret


def shape_count(argv: list[str]) -> int:
    """How many batch shapes one_batch will measure: its --batch-size x --input-len x --output-len lists (each one
    value by default, as in its BenchArgs)."""
    import argparse

    p = argparse.ArgumentParser(add_help=False)
    for flag in ("--batch-size", "--input-len", "--output-len"):
        p.add_argument(flag, type=int, nargs="+", default=[0])
    known, _ = p.parse_known_args(argv)
    return len(known.batch_size) * len(known.input_len) * len(known.output_len)


def main(one_batch: ModuleType | None = None, load_plugins: Callable[[], None] | None = None) -> None:
    """``one_batch``/``load_plugins``: SGLang's by default; the CPU tests hand in stand-ins (labelled)."""
    import importlib

    rounds = int(os.environ.get(ENV_ROUNDS, "4"))
    out = Path(os.environ[ENV_OUT])
    deadline = float(os.environ[ENV_DEADLINE]) if os.environ.get(ENV_DEADLINE) else None
    plugins = load_plugins or importlib.import_module("sglang.srt.plugins").load_plugins
    module = one_batch or importlib.import_module("sglang.benchmark.one_batch")
    plugins()
    tokens = tokens_from_env()
    if tokens:
        chunk_prefill(module, tokens)
    module.latency_test_run_once = InProcessAB(  # type: ignore[attr-defined]
        module.latency_test_run_once, rounds, out, deadline, shape_count(sys.argv[1:]))
    sys.argv = ["sglang.benchmark.one_batch", *sys.argv[1:]]
    module.cli_main()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
