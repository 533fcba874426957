"""pair_to_row_map: the LoRA MoE path marks every (token, k) pair with its flat index, or -1 where it is
routed to a negative expert id (Triton ``lora/moe/align_rows.py``).
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import Dim, ShapeCase, Signature, TensorArg
from astra_sglang.extract.catalog._lora_moe_align import MODULE, MOE
from astra_sglang.extract.catalog.base import CatalogEntry, exact_tolerances
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import DECODE_T, case, dedup


def _pair_shapes() -> list[ShapeCase]:
    cases = [case(["decode" if t <= 256 else "prefill"], f"{name} top-{k}, {t} tokens", T=t, K=k)
             for i, (name, (_, k)) in enumerate(MOE.items()) for t in (*DECODE_T[i % 2::2], 4096 * (i + 1))]
    cases += [case(["edge", "decode"], "edge: one token", T=1, K=8),
              case(["edge"], "edge: more than one 1024-pair block with a tail", T=300, K=6)]
    return dedup(cases)


def reference(**args):
    ids = args["topk_ids"].reshape(-1)
    p = torch.arange(ids.numel(), device=ids.device, dtype=torch.int32)
    return {"out": torch.where(ids >= 0, p, torch.full_like(p, -1))}


def make_inputs(dims, dtype, gen, device):
    e = max(64, 2 * dims["K"])
    logits = torch.randn(dims["T"], e, generator=gen, device=device)
    ids = logits.topk(dims["K"], dim=-1).indices
    dropped = torch.rand(ids.shape, generator=gen, device=device) < 0.2
    return {"topk_ids": torch.where(dropped, torch.full_like(ids, -1), ids).to(torch.int32)}


REFERENCE = FileText(
    doc="Reference for pair_to_row_map (astra-sglang, written): the flat pair index of every routed pair.",
    imports=("import torch",),
    functions=(reference,),
)

INPUTS = FileText(
    doc=(
        "Inputs for pair_to_row_map (astra-sglang, written): top-k routing of T tokens over E = max(64, 2 * "
        'dims["K"]) experts (the\n'
        "distinct ids a reference top-k of random router logits gives), with about one id in five replaced by -1\n"
        "(a pair this rank does not serve)."
    ),
    imports=("import torch",),
    functions=(make_inputs,),
)


ENTRY = CatalogEntry(
    short_name="pair_to_row_map",
    op_id="lora.pair_to_row_map",
    entry_point=f"{MODULE}:pair_to_row_map",
    kind="triton",
    signature=Signature(
        dims=[Dim(name="T", meaning="tokens"), Dim(name="K", meaning="top-k", max=32)],
        tensors=[
            TensorArg(name="topk_ids", role="input", shape=["T", "K"], dtype="int32", align_bytes=4, generated=True),
            TensorArg(name="out", role="output", shape=["T*K"], dtype="int32", align_bytes=4),
        ],
        dtypes=["int32"],
        relations=["out[p] = p if topk_ids.flatten()[p] >= 0 else -1"],
        returns=["out"],
    ),
    reference=REFERENCE,
    shapes=_pair_shapes,
    call=["topk_ids", "out"],
    wrapper=f"{MODULE}:pair_to_row_map",
    tolerances=exact_tolerances(["int32"]),
    callsite_modules=(MODULE,),
    serving_sites={f"{MODULE}:pair_to_row_map": "LoRA MoE runner: the pair -> row map its finalize gates on"},
    inputs=INPUTS,
    notes=["Indices: compared exactly."],
)
