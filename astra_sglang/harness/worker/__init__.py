"""The candidate worker: ``python -m astra_sglang.harness.worker RFD WFD ARENA_FD``, the only process that imports
candidate code, inside an OS sandbox (``harness/shared/sandbox.py``) installed before anything else. It computes
what the judge asks and nothing it reports is trusted alone.
"""
