"""A kernel launch refused for its configuration must not poison the next shape's timing (issue 24).

FlashInfer's MergeState asks for NH x D/8 threads a block: above 64 heads at head dim 128 that is over 1024, and
cudaLaunchKernel refuses it. FlashInfer returns the status (our glue raises it) but the runtime also records it as
its last error, and nothing read that flag. The judge skipped the baseline there and went on; the next eager torch
launch of its own (replay_guard's window copy before a timed replay) raised "CUDA error: invalid argument". So
merge_state's original could not be timed on its "all" shapes (T 256 NH 128 D 128), on the H100 four times,
2026-12-05..07 (docs/measurements/2026-12-07-d/). ``collect_launch_error`` reads the flag where the launch failed.
"""

from __future__ import annotations

import pytest

from astra_sglang.contract.eval_config import EvalConfig
from astra_sglang.contract.op import load_manifest
from astra_sglang.harness import evaluate

pytestmark = [pytest.mark.gpu, pytest.mark.gpu_timing]

WIDE = {"T": 256, "NH": 128, "D": 128}  # 2048 threads a block for FlashInfer's MergeState


def test_a_refused_library_launch_leaves_its_error_where_it_happened(restored_op):
    import torch

    from astra_sglang.harness.judge.session import collect_launch_error
    from astra_sglang.harness.shared.tensors import ArgSet
    from astra_sglang.loader.launch import load_inputs, make_launcher

    op = restored_op("merge_state")
    m = load_manifest(op)
    b = next(b for b in m.baselines if b.name == "flashinfer_merge_state")
    launch = make_launcher(op, m, "bfloat16", recipe=b.recipe, arch="sm_90a")
    a = ArgSet(m, WIDE, "bfloat16", "cuda", load_inputs(op, m))
    a.fill("normal", torch.Generator(device="cuda").manual_seed(0))
    with pytest.raises(Exception, match="invalid"):
        launch(a.args())
    left = collect_launch_error("cuda")  # the flag the refusal left: the next torch launch would have raised it
    assert left is not None and "invalid" in left, left
    assert collect_launch_error("cuda") is None  # read once, gone: torch launches run again


def test_merge_state_original_is_timed_where_flashinfer_refuses_the_shape(restored_op):
    cfg = EvalConfig(shapes="paper", dtypes=["bfloat16"], timing_dtypes=["bfloat16"], distributions=["normal"],
                     check_all_shapes=False, extra_timed_shapes=[WIDE], rep=50)
    r = evaluate(restored_op("merge_state"), None, cfg)
    assert r.ok and r.timing is not None, r.error
    assert any(s.dims == WIDE and s.original_us > 0 for s in r.timing.shapes), [s.dims for s in r.timing.shapes]
