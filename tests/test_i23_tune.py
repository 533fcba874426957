"""`tune decode_attention` (issue 23's sweep baseline): the space is the launch SGLang serves GQA decode with.

SGLang's decode attention module holds the MHA and grouped stage-1 kernels, stage 2 and ROCm's Lean kernel; swept
together they made 65,536 configs and `tune` refused the op. The contract names the kernel CUDA GQA serving spends
its time in, and the block size the wrapper assigns twice (32, and 16 under ``if _is_hip``) is swept on the
unconditional path.
"""

from __future__ import annotations

import itertools

from astra_sglang.contract.op import load_manifest
from astra_sglang.harness.parent.launch_params import launch_variant
from astra_sglang.harness.parent.tune_baseline import original_params


def test_the_sweep_covers_the_grouped_stage_1_launch_within_the_cap(restored_op):
    op = restored_op("decode_attention")
    manifest = load_manifest(op)
    params = original_params(op, manifest)
    by = {p.name: p for p in params}
    assert set(by) == {"_fwd_grouped_kernel_stage1.num_warps", "_fwd_grouped_kernel_stage1.num_stages",
                       "_fwd_grouped_kernel_stage1.BLOCK_N"}
    assert by["_fwd_grouped_kernel_stage1.BLOCK_N"].values == [16, 32, 64, 128]
    configs = list(itertools.product(*(p.values for p in params)))
    assert len(configs) == 64

    text = (op / manifest.recipe.source).read_text()
    v = launch_variant(text, params, {"_fwd_grouped_kernel_stage1.num_warps": 8,
                                      "_fwd_grouped_kernel_stage1.num_stages": 3,
                                      "_fwd_grouped_kernel_stage1.BLOCK_N": 64})
    assert "BLOCK = 64" in v and "BLOCK = 16" in v  # the HIP branch keeps its own value
    assert v.count("BLOCK = 32") == text.count("BLOCK = 32") - 1
