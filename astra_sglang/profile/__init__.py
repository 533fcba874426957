"""``astra-sglang profile``: which kernels a model's forward spends its GPU time in, and which op each belongs to.

``trace`` reads a torch.profiler chrome trace, ``attribution`` maps its kernels to the op ids of the committed
manifests (or to a kernel group) and ranks the ops worth optimizing, ``runner`` records the trace on a GPU host
with SGLang's own ``one_batch`` forward, ``configs`` writes config-only model folders to run it without weights.
Only ``runner`` needs a GPU; the rest is CPU-only and stdlib/pydantic (matplotlib for the chart, lazily).
"""
