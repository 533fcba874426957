import torch


def reference(req_to_token, req_pool_indices, seq_lens, kv_indptr, kv_indices,
              kv_start_idx=None, req_to_token_stride=None, **_):
    """Pure-torch restatement of create_flashinfer_kv_indices_triton
    (ENTRY_PAGE_SIZE=1, no token_mapping): for every lane b and j < seq_lens[b],
        kv_indices[kv_indptr[b] + j] = req_to_token[req_pool_indices[b], kv_start_idx[b] + j]
    Every other element of kv_indices is left as it was."""
    out = kv_indices.clone()
    dev = out.device
    lens = seq_lens.to(torch.int64).clamp(min=0)
    B = lens.numel()
    total = int(lens.sum().item())
    if total == 0:
        return {"kv_indices": out}
    lane = torch.repeat_interleave(torch.arange(B, device=dev, dtype=torch.int64), lens)
    first = torch.cumsum(lens, 0) - lens
    pos = torch.arange(total, device=dev, dtype=torch.int64) - first[lane]
    if kv_start_idx is not None:
        start = kv_start_idx.to(torch.int64)[lane]
    else:
        start = torch.zeros_like(pos)
    stride = int(req_to_token.stride(0)) if req_to_token_stride is None else int(req_to_token_stride)
    rows = req_pool_indices.to(torch.int64)[lane]
    flat = req_to_token.reshape(-1)
    vals = flat[rows * stride + start + pos]
    dest = kv_indptr.to(torch.int64)[lane] + pos
    out[dest] = vals.to(out.dtype)
    return {"kv_indices": out}
