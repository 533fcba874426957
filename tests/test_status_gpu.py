"""On a GPU: a call made during CUDA-graph capture is counted once as captured, and graph replays (no Python
call) are not counted at all, which is what ``patches status`` tells an operator."""

from __future__ import annotations

import pytest

from astra_sglang.patches.registry import discover


@pytest.mark.gpu
@pytest.mark.parametrize("entry", discover(), ids=lambda e: e.patch_id)
def test_captured_calls_are_counted_once_and_replays_not_at_all(entry):
    import torch

    from astra_sglang.patches import status
    from astra_sglang.patches.runtime import PatchRuntime
    from astra_sglang.patches.tooling.devcheck import extracted_original
    from astra_sglang.patches.tooling.verify import to_measure_here

    m = entry.manifest
    assert m is not None
    from astra_sglang.platform_info import of_device

    dev = of_device("cuda")
    # the counting is under test, not the GPU gate: a patch measured on the H200 alone is refused on an H100 by
    # design (test_patches_registry), which failed this test there (2026-12-06); one whose guard serves nothing on
    # this GPU (no S 512 twins timed there) likewise
    here = to_measure_here(m, dev.arch, dev.gpu)
    status.reset(m.patch_id)
    original = extracted_original(entry)
    rt = PatchRuntime(entry.path, here)
    hook = rt.hook_for(original, m.targets[0])
    assert rt.activate("cuda", original), status.statuses()[m.patch_id].reason
    st = status.statuses()[m.patch_id]
    assert st.first_call_check.startswith("passed: checked on sm_")
    args, kw = rt.adapter.sample(m.check_shapes[0], getattr(torch, m.guard.dtypes[0]), "cuda", 1)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        hook(*args, **kw)                                     # warm-up, eager: served, not captured
    torch.cuda.current_stream().wait_stream(side)
    assert (st.served_by_patch, st.captured_by_patch) == (1, 0)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        hook(*args, **kw)
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    assert (st.served_by_patch, st.captured_by_patch, st.served_by_original) == (2, 1, 0)
