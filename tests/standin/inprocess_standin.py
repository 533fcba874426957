"""A STAND-IN for ``python -m astra_sglang.e2e.inprocess_child`` (labelled as such: not SGLang, no model, no GPU), for
the CPU tests of ``e2e --in-process``. It runs the real child (``inprocess_child.main``) over a stand-in of
SGLang's ``sglang.benchmark.one_batch`` module and of ``load_plugins``:

- load_plugins: the stand-in patch ``standin-patch`` recorded through the plugin's real status module, active;
- a ModelRunner whose "decode graphs" are what its last ``init_decode_cuda_graph`` saw: the patch's state at capture
  decides which kernel every later step replays, and the capture's calls are counted on the patch's real counters
  (served by the patch when it is active, by the original otherwise), as the hook counts calls inside a capture;
- ``latency_test_run_once``: decode step 10 ms x (1 + bs/100), times STANDIN_B_FACTOR (default 0.9) when the
  captured graphs hold the patch; prefill 50 ms x the same, eager, so it follows the patch's state at call time;
  each times a small per-round factor shared by the round's three arm-runs (one process drifts slowly; STANDIN_NOISE,
  default 0.002, over van der Corput quantiles);
- ``cli_main``: one warm-up call, then one call per (batch size, input len, output len), one_batch's JSONL written.

STANDIN_NO_RECAPTURE="<arm-run numbers>" (e.g. "2,5"): those calls of ``init_decode_cuda_graph`` do nothing, the graphs
stay as they were (another arm's kernel), and the run must say so.
STANDIN_OOM_BS=<batch size>: the prefill at that batch size dies as SGLang's did on the H100 (2026-12-06, batch 32 at
context 8160): torch's OutOfMemoryError on stderr, then NCCL's teardown warning, exit 1.
STANDIN_ARM_SECONDS=<s>: each call of ``latency_test_run_once`` (warm-up and arm-runs) sleeps that long first.
STANDIN_PREFILL_LIMIT=<tokens>: one ``extend`` over more prompt tokens than that dies the same way (the activations
of a one-shot prefill); the bench runner's ``extend`` returns a batch whose ``merge_batch`` joins others, as
SGLang's ScheduleBatch does, and the timed call checks that the decode batch holds every request, in order.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from statistics import NormalDist
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(__file__))
from one_batch_standin import one_batch_args, van_der_corput  # noqa: E402

from astra_sglang.e2e import inprocess_child  # noqa: E402
from astra_sglang.patches import status, status_file  # noqa: E402

PATCH = "standin-patch"
CALLS_PER_CAPTURE = 4


class Runner:
    def __init__(self) -> None:
        self.decode_cuda_graph_runner = object()
        self.captured = "active"                     # captured at load, patch serving

    def init_decode_cuda_graph(self) -> None:
        self.captures = getattr(self, "captures", 0) + 1
        if str(self.captures) in os.environ.get("STANDIN_NO_RECAPTURE", "").split(","):
            self.decode_cuda_graph_runner = object()
            return
        st = status.get(PATCH)
        self.captured = st.state
        for _ in range(CALLS_PER_CAPTURE):
            if st.state == "active":
                st.served_by_patch += 1
                st.captured_by_patch += 1
            else:
                st.served_by_original += 1
                st.captured_by_original += 1
        self.decode_cuda_graph_runner = object()


class Batch:
    """What SGLang's ScheduleBatch is to one_batch here: its requests, and the scheduler's merge."""

    def __init__(self, reqs: list) -> None:
        self.reqs = list(reqs)

    def merge_batch(self, other: Batch) -> None:
        self.reqs = self.reqs + other.reqs


def _die_out_of_memory() -> None:
    sys.stderr.write("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.97 GiB. GPU 0 has "
                     "a total capacity of 79.18 GiB of which 3.57 GiB is free.\n[rank0]:[W1206 16:29:08] Warning: "
                     "WARNING: destroy_process_group() was not called before program exit\n")
    sys.exit(1)


class _TorchBenchRunner:
    """one_batch's runner of that name: ``torch_runner`` and the prefill of a list of requests (the chunked prefill
    replaces this class's ``extend``, as it replaces SGLang's)."""

    def __init__(self) -> None:
        self.torch_runner = Runner()

    def extend(self, reqs: list) -> tuple:
        import torch

        tokens = sum(len(r.origin_input_ids) for r in reqs)
        limit = os.environ.get("STANDIN_PREFILL_LIMIT")
        if limit and tokens > int(limit):
            _die_out_of_memory()
        return torch.tensor([r.rid for r in reqs]), None, Batch(reqs)


_calls = [0]


def latency_test_run_once(run_name, model_runner, rank_print, reqs, batch_size, input_len, output_len, *rest):
    _calls[0] += 1
    if os.environ.get("STANDIN_OOM_BS") == str(batch_size):
        _die_out_of_memory()
    time.sleep(float(os.environ.get("STANDIN_ARM_SECONDS", "0")))  # a measurement that takes time
    reqs = [SimpleNamespace(rid=i, origin_input_ids=[0] * input_len) for i in range(batch_size)]
    next_ids, _, batch = model_runner.extend(reqs)
    if [r.rid for r in batch.reqs] != list(range(batch_size)) or next_ids.tolist() != list(range(batch_size)):
        raise RuntimeError(f"stand-in: the decode batch lost requests: {[r.rid for r in batch.reqs]}")
    k = max(1, (_calls[0] - 2) // 3 + 1)              # the round (after the warm-up): one drift for its three arms
    z = NormalDist().inv_cdf(van_der_corput(k))
    noise = math.exp(float(os.environ.get("STANDIN_NOISE", "0.002")) * z)
    runner = model_runner.torch_runner
    b = float(os.environ.get("STANDIN_B_FACTOR", "0.9"))
    base = 1.0 + batch_size / 100
    st = status.get(PATCH)
    if st.state == "active":                          # the eager prefill call goes through the hook
        st.served_by_patch += 1
    else:
        st.served_by_original += 1
    return {"run_name": run_name, "batch_size": batch_size, "input_len": input_len, "output_len": output_len,
            "prefill_latency": 0.05 * base * (b if st.state == "active" else 1.0) * noise,
            "median_decode_latency": 0.01 * base * (b if runner.captured == "active" else 1.0) * noise}


def cli_main() -> None:
    args = one_batch_args()
    runner = one_batch._TorchBenchRunner()
    one_batch.latency_test_run_once("warmup", runner, print, None, args.batch_size[0], args.input_len[0], 8)
    results = []
    for bs in args.batch_size:
        for il in args.input_len:
            for ol in args.output_len:
                results.append(one_batch.latency_test_run_once("standin", runner, print, None, bs, il, ol))
    with open(args.result_filename, "a") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")


def load_plugins() -> None:
    st = status.get(PATCH, "standin_op")
    st.state = "active"
    st.first_call_check = "passed (stand-in)"
    status_file.start()


one_batch = SimpleNamespace(latency_test_run_once=latency_test_run_once, cli_main=cli_main,
                            _TorchBenchRunner=_TorchBenchRunner)

if __name__ == "__main__":
    inprocess_child.main(one_batch=one_batch, load_plugins=load_plugins)  # type: ignore[arg-type]
