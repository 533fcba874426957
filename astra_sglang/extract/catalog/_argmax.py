"""Row-wise argmax over wide float32 rows (Triton ``speculative/row_argmax.py``): greedy picks of samplers.

``row_argmax(x) = x.argmax(-1)`` serves the Gumbel/exponential-race sampler of speculative decoding
(``srt/speculative/spec_utils.py``); ``div_argmax(x, d) = (x / d).argmax(-1)`` the exponential-race sampler of
the Gemma-4 diffusion denoiser (``srt/dllm/algorithm/gemma4_renoise.py``). Ties go to the lowest index, like
torch.argmax; the division is IEEE round-to-nearest in both (tl.div_rn, torch's float32 ``/``).
"""

from __future__ import annotations

from astra_sglang.contract.op import Dim, ShapeCase
from astra_sglang.extract.shapes import DECODE_T, case, dedup

MODULE = "sglang.kernels.ops.speculative.row_argmax"
VOCAB = {"LLaMA-2": 32000, "LLaMA-3": 128256, "Qwen2.5": 152064, "Gemma": 262144}


def shapes() -> list[ShapeCase]:
    cases: list[ShapeCase] = []
    for i, (name, v) in enumerate(VOCAB.items()):
        for j, t in enumerate(DECODE_T):
            if (i + j) % 2 == 0:
                cases.append(case(["decode"], f"{name} vocab, {t} rows (requests x draft tokens)", R=t, V=v))
    cases += [
        case(["edge", "decode"], "edge: one row", R=1, V=128256),
        case(["edge"], "edge: 64 rows (last of the split-64 path)", R=64, V=32000),
        case(["edge"], "edge: 65 rows (first of the medium path)", R=65, V=32000),
        case(["edge"], "edge: 257 rows (medium path, 8192-wide blocks)", R=257, V=151936),
        case(["edge"], "edge: vocab not a multiple of any block", R=7, V=1000),
        # CPU (interpreter) shapes: small rows with tails (see the notes for the rows > 64 path)
        case(["test", "edge"], "CPU: one row", R=1, V=5),
        case(["test", "edge"], "CPU: split-64 path, rows of unequal split tails", R=5, V=130),
    ]
    return dedup(cases)


def dims() -> list[Dim]:
    return [Dim(name="R", meaning="rows (requests, or requests x draft tokens)"), Dim(name="V", meaning="vocab")]
