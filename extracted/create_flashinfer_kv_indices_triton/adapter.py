# Launches create_flashinfer_kv_indices_triton the way its only call site,
# KVIndexTranslator.pack_read_stream (sglang/srt/mem_cache/kv_index_translator.py),
# does on a plain (static) pool:
#
#   create_flashinfer_kv_indices_triton[(bs, num_token_blocks)](
#       src.ids, src.row_ids[:bs], seq_lens, indptr, kv_start_idx, out,
#       src.row_stride, ENTRY_PAGE_SIZE=src.entry_page_size,
#       TOKEN_BLOCK_PARALLEL=num_token_blocks > 1, token_mapping=token_mapping)
#
# with entry_page_size = 1 and token_mapping = None, and num_token_blocks sized
# as the spec-decode callers ask for it (num_token_blocks=None, no host length
# sum): spec_kv_index_token_blocks(table_width=req_to_token.size(1),
# kv_lens_sum=None, batch_size=bs) -- 1 (the historical 1-D launch) below a
# 32768-wide table, else enough blocks to reach ~512 programs, at most one per
# 8192 table columns. Any block count gives the same result.

_MIN_TOKENS_PER_BLOCK = 8192
_TARGET_PROGRAMS = 512
_SPEC_KV_INDEX_BLOCKS_MIN_CONTEXT = 32768


def _num_token_blocks(table_width: int, batch_size: int) -> int:
    if table_width < _SPEC_KV_INDEX_BLOCKS_MIN_CONTEXT or batch_size <= 0:
        return 1
    cap = (table_width + _MIN_TOKENS_PER_BLOCK - 1) // _MIN_TOKENS_PER_BLOCK
    want = _TARGET_PROGRAMS // max(1, batch_size)
    return max(1, min(cap, want))


def call(kernel, req_to_token, req_pool_indices, seq_lens, kv_indptr,
         kv_start_idx, kv_indices, req_to_token_stride):
    bs = int(seq_lens.numel())
    if bs == 0:
        return None
    num_token_blocks = _num_token_blocks(int(req_to_token.size(1)), bs)
    kernel[(bs, num_token_blocks)](
        req_to_token,
        req_pool_indices[:bs],
        seq_lens,
        kv_indptr,
        kv_start_idx,
        kv_indices,
        req_to_token_stride,
        ENTRY_PAGE_SIZE=1,
        TOKEN_BLOCK_PARALLEL=num_token_blocks > 1,
        token_mapping=None,
    )
    return None
