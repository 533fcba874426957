"""The on-disk contract, at the bottom of the package: op manifests, evaluation config and results, patch manifests.

Imports nothing but pydantic and the stdlib, so every stage (extract, loader, harness, loop, patches, and the
plugin inside SGLang's server) can read and write these files without pulling in each other. No eager imports
here: import the module you need (``astra_sglang.contract.op``, ``.result``, ``.eval_config``, ``.patch``).
"""
