"""Reference for the h_merge fixture (ours): merge_state in base e, computed in float64."""

import torch


def reference(prefix_output, prefix_lse, suffix_output, suffix_lse, output=None, output_lse=None):
    pl = prefix_lse.double()
    sl = suffix_lse.double()
    pl = torch.where(pl == float("inf"), torch.full_like(pl, float("-inf")), pl)
    sl = torch.where(sl == float("inf"), torch.full_like(sl, float("-inf")), sl)
    m = torch.maximum(pl, sl)
    pe = torch.exp(pl - m)
    se = torch.exp(sl - m)
    tot = pe + se
    v = prefix_output.double() * (pe / tot)[..., None] + suffix_output.double() * (se / tot)[..., None]
    return {"output": v, "output_lse": torch.log(tot) + m}
