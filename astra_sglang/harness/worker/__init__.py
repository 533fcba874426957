"""The candidate worker: ``python -m astra_sglang.harness.worker.process RFD WFD ARENA_FD``, the only process
that imports candidate code. It computes what the judge asks and nothing it reports is trusted alone.
"""
