"""The user's side of an evaluation: screening and building candidates, the suite and the held-out secret,
sweeps of a candidate's or the original's launch space, contract validation and the printed report.

It starts the judge (``judge.process``) through ``shared.isolation`` and reads back only its ``CheckResult``:
no candidate code ever runs in this process.
"""
