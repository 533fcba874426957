"""What every process of the trust chain (parent -> judge -> worker) speaks: the protocol's messages, the tensors
and their shared-memory arena, the suite's cases, the one timing module and the child-process watchdogs.

Nothing here decides a verdict; the judge does, from these pieces.
"""
