"""get_last_loc_triton, the legacy kernel: stores the int32 table entry straight into a result of the
prefix-length dtype (CUDA with the Triton/FlashInfer attention backends)."""

from __future__ import annotations

from astra_sglang.extract.catalog._last_loc import last_loc_entry, reference
from astra_sglang.extract.catalog.source_text import FileText

REFERENCE = FileText(
    doc=(
        "Reference for get_last_loc_triton (astra-sglang, written; restates SGLang's get_last_loc_torch):\n"
        "last_loc[i] = req_to_token[req_pool_indices[i], prefix_lens[i] - 1], or -1 where prefix_lens[i] == 0."
    ),
    imports=("import torch",),
    functions=(reference,),
)

ENTRY = last_loc_entry("get_last_loc_triton", "get_last_loc on CUDA with the Triton/FlashInfer attention "
                       "backends (every extend of the paged allocator)", REFERENCE)
