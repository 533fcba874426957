"""get_last_loc_triton_safe, the HIP/NPU kernel: keeps an int32 result and promotes it in torch."""

from __future__ import annotations

from astra_sglang.extract.catalog._last_loc import last_loc_entry, reference
from astra_sglang.extract.catalog.source_text import FileText

REFERENCE = FileText(
    doc=(
        "Reference for get_last_loc_triton_safe (astra-sglang, written; restates SGLang's get_last_loc_torch):\n"
        "last_loc[i] = req_to_token[req_pool_indices[i], prefix_lens[i] - 1], or -1 where prefix_lens[i] == 0."
    ),
    imports=("import torch",),
    functions=(reference,),
)

ENTRY = last_loc_entry("get_last_loc_triton_safe", "get_last_loc on HIP/NPU (int32 result, promoted after)", REFERENCE)
