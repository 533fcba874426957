"""Run ON THE H200: SGLang's own model forward, ``sglang.benchmark.one_batch``, in this process after
``load_plugins()`` (one_batch does not call it), so whatever ASTRA_SGLANG_PATCHES says is installed the way a server
installs it; at exit one line ``ASTRA-PATCHES {json}`` with each patch's state, first-call check and calls (served
by the patch / the original, and how many of each were captured into CUDA graphs, whose replays then run them).
Usage: forward.py <one_batch arguments>   (e.g. --model-path M --load-format dummy --batch-size 1 32 128 ...)
"""

import atexit
import json
import runpy
import sys

from sglang.srt.plugins import load_plugins


def _report() -> None:
    from astra_sglang.patches import status

    out = {pid: {"state": s.state, "reason": s.reason, "first_call_check": s.first_call_check,
                 "patch": s.served_by_patch, "original": s.served_by_original,
                 "captured_patch": s.captured_by_patch, "captured_original": s.captured_by_original}
           for pid, s in status.statuses().items()}
    print("ASTRA-PATCHES " + json.dumps(out), flush=True)


load_plugins()
atexit.register(_report)
sys.argv = ["sglang.benchmark.one_batch", *sys.argv[1:]]
runpy.run_module("sglang.benchmark.one_batch", run_name="__main__")
