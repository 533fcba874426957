"""The evaluation harness: build, check and time a candidate kernel against the extracted original.

No eager imports: ``astra_sglang.harness.evaluate`` is the entry point, the schemas live in
``astra_sglang.contract``.
"""
