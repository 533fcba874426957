"""apply_interleaved_rope: Qwen3-VL's interleaved M-RoPE cos/sin gather (Triton
``attention/rope.py``), for mrope_section = [24, 20, 20]; the family's shapes are in ``_rope``.
"""

from __future__ import annotations

from astra_sglang.contract.op import (
    Dim,
    ShapeCase,
    Signature,
    TensorArg,
)
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import DECODE_T, PREFILL_T, case, dedup

_MROPE_MODULE = "sglang.kernels.ops.attention.mrope"

_MROPE_SECTION = [24, 20, 20]  # Qwen3-VL's rope_scaling.mrope_section (head_dim 128, rotary_dim 128)


_MROPE_D = sum(_MROPE_SECTION)


def _mrope_shapes() -> list[ShapeCase]:
    cases = [case(["decode"], "Qwen3-VL decode", S=t, D=_MROPE_D) for t in DECODE_T]
    cases += [case(["prefill"], "Qwen3-VL prefill (image + text tokens)", S=t, D=_MROPE_D) for t in PREFILL_T]
    cases += [
        case(["edge"], "edge: a partial BLOCK_S tile", S=65, D=_MROPE_D),
        case(["edge", "prefill"], "edge: long video prompt", S=65536, D=_MROPE_D),
    ]
    return dedup(cases)


SECTION = [24, 20, 20]


def reference(**args):
    x = args["x"]
    out = x[0].clone()
    out[..., 1 : SECTION[1] * 3 : 3] = x[1, ..., 1 : SECTION[1] * 3 : 3]
    out[..., 2 : SECTION[2] * 3 : 3] = x[2, ..., 2 : SECTION[2] * 3 : 3]
    return {"out": out}


REFERENCE = FileText(
    doc=(
        "Reference for apply_interleaved_rope_triton (astra-sglang, written; restates SGLang's\n"
        "apply_interleaved_rope in srt/layers/rotary_embedding/mrope.py) for mrope_section = [24, 20, 20].\n"
        "\n"
        "Lane d of the output takes the temporal axis x[0], except lanes d % 3 == 1 below 3*section[1] (height, x[1])\n"
        "and lanes d % 3 == 2 below 3*section[2] (width, x[2]). A gather: exact."
    ),
    constants=("SECTION",),
    functions=(reference,),
)


ENTRY = CatalogEntry(
    short_name="apply_interleaved_rope",
    op_id="attention.apply_interleaved_rope_triton",
    entry_point=f"{_MROPE_MODULE}:apply_interleaved_rope_triton",
    kind="triton",
    signature=Signature(
        dims=[
            Dim(name="S", meaning="tokens"),
            Dim(name="D", meaning=f"rotary_dim // 2 (pinned to sum(mrope_section) = {_MROPE_D})", min=_MROPE_D,
                max=_MROPE_D),
        ],
        tensors=[
            TensorArg(name="x", role="input", shape=["3", "S", "D"], dtype="{dtype}"),
            TensorArg(name="out", role="output", shape=["S", "D"], dtype="{dtype}"),
        ],
        dtypes=["bfloat16", "float16", "float32"],
        relations=[
            "x = the cos (or sin) half of cos_sin_cache[positions] for the 3 M-RoPE axes (t, h, w)",
            f"mrope_section = {_MROPE_SECTION} (Qwen3-VL), passed as a literal",
            "out[s, d] = x[1, s, d] if d % 3 == 1 and d < 3*section[1]; x[2, s, d] if d % 3 == 2 and "
            "d < 3*section[2]; else x[0, s, d]",
        ],
        returns=["out"],
    ),
    reference=REFERENCE,
    shapes=_mrope_shapes,
    call=["x", repr(_MROPE_SECTION)],
    wrapper=f"{_MROPE_MODULE}:apply_interleaved_rope_triton",
    forward_native="sglang.srt.layers.rotary_embedding.mrope:apply_interleaved_rope",
    aliases=("apply_interleaved_rope_triton",),
    callsite_modules=(_MROPE_MODULE, "sglang.srt.layers.rotary_embedding.mrope"),
    serving_sites={
        f"{_MROPE_MODULE}:apply_interleaved_rope_triton": "the definition",
        "sglang.srt.layers.rotary_embedding.mrope:apply_interleaved_rope_triton": "MRotaryEmbedding."
        "get_cos_sin_with_position for 2-D positions with mrope_interleaved when both attention backends "
        "support Triton (called for cos and for sin); reached by callers that precompute position_cos/sin "
        "(qsa_indexer, dflash, the NPU paths of llama/glm4_moe/qwen3_5); MRotaryEmbedding.forward_cuda itself "
        "uses triton_mrope_fused instead",
    },
    notes=["Triton kernel apply_interleaved_rope_kernel on grid (cdiv(S, 64), cdiv(D, 128)); the wrapper makes x "
           "contiguous (SGLang passes the cos/sin chunk view of cos_sin_cache[positions])"],
)
