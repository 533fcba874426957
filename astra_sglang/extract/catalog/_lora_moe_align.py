"""LoRA-MoE routing helpers (Triton ``lora/moe/align_rows.py``): pair-to-row maps and one-token alignment.

The LoRA MoE path drops pairs routed to a negative expert id (experts outside this rank or masked padding):
pair_to_row_map marks every (token, k) pair with its flat index or -1; moe_align_single_token is the decode
fast path of moe_align_block_size for one token with distinct top-k ids (topk <= 32): one block per valid
expert, sorted by expert id.
"""

from __future__ import annotations

MODULE = "sglang.kernels.ops.lora.moe.align_rows"
MOE = {"Mixtral-8x7B": (8, 2), "Qwen3-30B-A3B": (128, 8), "DeepSeek-V3": (256, 8)}


