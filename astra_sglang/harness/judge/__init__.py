"""The trusted checker process: ``python -m astra_sglang.harness.judge.process RFD WFD``.

It holds the original, the reference, the tolerances and the held-out cases, asks the candidate's worker one
thing at a time, and decides the verdict: correctness (``correctness``), timed shapes (``timed``), the
kernels SGLang serves beside the original (``baselines``), composed by ``checker.Checker``.
"""
