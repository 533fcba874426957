"""Reference for pack_verify_mask_into (astra-sglang, written): byte j of request b holds bits
8j..8j+7 of its mask block, bit i of the byte = element 8j+i (little bit order); bytes past the packed
stream are left as they were."""

import torch


def reference(**args):
    out = args["output"].clone()
    mask, q = args["mask"].reshape(-1), args["q_width"]
    kv, packed = args["kv_indptr"].tolist(), args["packed_indptr"].tolist()
    weights = 2 ** torch.arange(8, device=mask.device)
    for b in range(args["n_requests"]):
        bits = mask[kv[b] * q:kv[b + 1] * q].long()
        n = (bits.numel() + 7) // 8
        bits = torch.cat([bits, bits.new_zeros(8 * n - bits.numel())]).view(n, 8)
        out[packed[b]:packed[b] + n] = (bits * weights).sum(1).to(out.dtype)
    return {"output": out}
