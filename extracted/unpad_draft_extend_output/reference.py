"""Reference for unpad_draft_extend_output (astra-sglang, written): output[cu[b] + i] = raw_out[b, i]
for i < len[b]: the ragged stream of every request's first len[b] rows."""

import torch


def reference(**args):
    raw, lens = args["raw_out"], args["seq_lens_q"].tolist()
    return {"output": torch.cat([raw[b, :n] for b, n in enumerate(lens)], 0)}
