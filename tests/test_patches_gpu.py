"""On the GPU (no SGLang needed): every shipped patch, loaded by the plugin's own code from patches/, matches
SGLang's original rebuilt from extracted/<op>/, eagerly and under CUDA-graph capture/replay, and calls outside
its guard reach the original. Same code as scripts/gpu_patches_check.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from astra_sglang.patches.registry import discover  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("entry", discover(), ids=lambda e: e.patch_id)
def test_patch_matches_extracted_original_on_gpu(entry):
    from astra_sglang.patches.tooling.devcheck import check_on_device

    r = check_on_device(entry, time_it=False)
    assert r.ok, r.as_dict()
    assert r.counters["patch"] > 0
    assert r.outside_guard and all(v == "original" for v in r.outside_guard.values()), r.outside_guard
