"""The judge's timing sets live as long as the graphs captured on them (H200, 2026-12-05).

A CUDA graph holds raw device pointers, not tensors. The judge captured the original on its timing sets inside
``ShapeTimer._local_arms`` and kept only the graph and the replay guard (outputs and perturbable inputs), so the
sets' other inputs (decode attention's kv_indptr, kv_indices, num_kv_splits, q, k_buffer) went back to the caching
allocator when the function returned. The replays read that freed memory until the replay guard's first copy took
it over: SGLang's decode attention then read a copy as kv_indices, and every queued candidate's evaluation died on
an illegal memory access in the original's replay. Here a clock that captures like CUDA (the capture keeps nothing
of the launch) shows whether every tensor the graph was captured on is still alive."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from astra_sglang.contract.op import Manifest
from astra_sglang.harness.judge.timed import ShapeTimer
from astra_sglang.harness.shared.protocol import CaseSpec
from astra_sglang.loader.launch import load_inputs

OP = Path(__file__).resolve().parents[1] / "extracted" / "decode_attention"
DIMS = {"B": 2, "S": 8, "NK": 1, "G": 2, "D": 16, "P": 1, "R": 1, "X": 1, "KX": 0, "MS": 2}


class GraphLikeClock:
    """``capture`` runs the launch once and returns a token holding none of its arguments, as a CUDA graph."""

    def capture(self, launch: Any, eager_first: bool = True) -> object:
        launch()
        return object()


def test_every_tensor_the_original_was_captured_on_outlives_the_arms_builder():
    manifest = Manifest.model_validate_json((OP / "manifest.json").read_text())
    session = SimpleNamespace(clock=GraphLikeClock(), manifest=manifest, device="cpu",
                              op_inputs=load_inputs(OP, manifest), notes=[])
    timer = ShapeTimer(session)  # type: ignore[arg-type]
    timer._per_replay = 1
    captured: list[weakref.ref[Any]] = []

    def launch(args: dict[str, Any]) -> None:
        captured.extend(weakref.ref(v) for v in args.values() if hasattr(v, "data_ptr"))

    case = CaseSpec(dims=DIMS, dtype="float32", distribution="normal", seed=1)
    arms = timer._local_arms(case, launch, 1, True, ["o", "attn_logits", "attn_lse"], with_baseline=False)
    gc.collect()
    assert len(captured) == 9
    dead = [i for i, r in enumerate(captured) if r() is None]
    assert not dead, f"{len(dead)} of the graph's {len(captured)} tensors were freed while its arms live"
    del arms
