"""Run ON THE H200: SGLang's own model forward, ``sglang.benchmark.one_batch``, in this process after
``load_plugins()`` (one_batch does not call it), so whatever ASTRA_SGLANG_PATCHES says is installed the way a server
installs it; at exit one line ``ASTRA-PATCHES {json}`` with each patch's state, first-call check and calls (served
by the patch / the original, and how many of each were captured into CUDA graphs, whose replays then run them).
The code is astra-sglang's own (``astra_sglang.profile.one_batch_child``), installed on the device by device.sh.
Usage: forward.py <one_batch arguments>   (e.g. --model-path M --load-format dummy --batch-size 1 32 128 ...)
"""

from astra_sglang.profile.one_batch_child import main

main()
