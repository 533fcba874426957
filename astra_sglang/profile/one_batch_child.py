"""Run SGLang's own ``sglang.benchmark.one_batch`` in this process after ``load_plugins()`` (one_batch does not call
it), so whatever ``ASTRA_SGLANG_PATCHES`` says is installed the way a server installs it; at exit one line
``ASTRA-PATCHES {json}`` with each patch's state and calls (``attribution.served_calls`` reads it back) and one
``ASTRA-GPU {json}`` with the clocks, temperature and power the GPU ran at meanwhile (``gpu_state``).
The profile runner starts it once per pass: graphs off with the profiler, graphs on for the step time.
With ``ASTRA_PREFILL_CHUNK_TOKENS`` set (``--prefill-chunk-tokens``) one_batch prefills in groups of requests
(``chunked_prefill.py``).
``scripts/h200_server/forward.py`` runs this from the device's site archive.
Usage: python -m astra_sglang.profile.one_batch_child <one_batch arguments>
"""

from __future__ import annotations

import atexit
import importlib
import json
import runpy
import sys
from typing import Any

from astra_sglang.profile.attribution import PATCH_LINE
from astra_sglang.profile.chunked_prefill import chunk_prefill, tokens_from_env

ONE_BATCH = "sglang.benchmark.one_batch"


def _report() -> None:
    from astra_sglang.patches import status

    out = {pid: {"state": s.state, "reason": s.reason, "first_call_check": s.first_call_check,
                 "patch": s.served_by_patch, "original": s.served_by_original, "passed_on": s.passed_on,
                 "captured_patch": s.captured_by_patch, "captured_original": s.captured_by_original}
           for pid, s in status.statuses().items()}
    print(PATCH_LINE + json.dumps(out), flush=True)


def main() -> None:
    from sglang.srt.plugins import load_plugins

    from astra_sglang.profile import gpu_state

    sampler = gpu_state.start_for_this_process()  # the clocks this process ran at, for e2e's noise finding
    load_plugins()
    atexit.register(_report)
    atexit.register(gpu_state.report, sampler)
    sys.argv = [ONE_BATCH, *sys.argv[1:]]
    tokens = tokens_from_env()
    if not tokens:
        _run_as_main()
        return
    # the prefill in groups: one_batch imported (not run as __main__, whose classes a patch could not reach), its
    # runner's extend replaced, then what its __main__ does
    module = _imported()
    chunk_prefill(module, tokens)
    module.cli_main()


def _run_as_main() -> None:
    runpy.run_module(ONE_BATCH, run_name="__main__")


def _imported() -> Any:
    return importlib.import_module(ONE_BATCH)


if __name__ == "__main__":
    main()
