"""The kernels SGLang serves beside the original: the library baseline timed next to it, and where the original
refuses a shape, the same-function kernel SGLang dispatches to there (``Baseline.serves``), which then stands in
for it both as the checked original and as what the candidate is timed against.
"""

from __future__ import annotations

from typing import Any

import torch

from astra_sglang.contract.op import (
    ORIGINAL,
    Baseline,
    CudaJitRecipe,
    served_baseline,
    states_serving,
)
from astra_sglang.harness.judge.session import JudgeSession, Launcher, collect_launch_error, poisons_context
from astra_sglang.harness.shared import timing
from astra_sglang.harness.shared.protocol import (
    CaseSpec,
)
from astra_sglang.harness.shared.tensors import ArgSet
from astra_sglang.loader.launch import make_launcher


class Baselines:
    def __init__(self, session: JudgeSession):
        self.s = session
        self._served_fns: dict[tuple[str, str], Launcher] = {}

    def library_baseline(self, dtype: str, dims: dict[str, int]) -> tuple[str, Launcher] | None:
        """The library kernel SGLang really serves with (e.g. FlashInfer's), timed beside the original."""
        s = self.s
        if not s.cfg.time_baselines:
            return None
        listed = s.manifest.baselines
        if states_serving(s.manifest):  # only what SGLang serves here (None: the original itself)
            served = served_baseline(s.manifest, dims, dtype)
            listed = [served] if served is not None else []
        for b in listed:
            if b.name not in s.job.baselines or (isinstance(b.recipe, CudaJitRecipe)
                                                 and dtype not in b.recipe.template_args):
                continue
            try:
                launch = make_launcher(s.op_dir, s.manifest, dtype, recipe=b.recipe, arch=s.cfg.arch,
                                       cache_dir=s.cfg.cache_dir)
                probe = ArgSet(s.manifest, dims, dtype, s.device, s.op_inputs)
                probe.fill("normal", torch.Generator(device=s.device).manual_seed(1))
                launch(probe.args())
                if collect_launch_error(s.device) is not None:  # refused with no word but CUDA's flag
                    continue
                s.clock.sync()
            except Exception as e:  # noqa: BLE001 - a baseline that refuses a shape is simply not timed there
                # a refusal it raised (our glue over FlashInfer's returned status) left the flag set as well
                collect_launch_error(s.device)
                if poisons_context(e):
                    raise
                continue
            return b.name, launch
        return None

    def where_refused(self, dims: dict[str, int], dtype: str, l2: int) -> str:
        """Where the original refuses a shape, what SGLang's library path takes there (a note, not a row)."""
        s = self.s
        b = self.library_baseline(dtype, dims)
        if b is None:
            return ""
        cfg = s.cfg
        probe = ArgSet(s.manifest, dims, dtype, s.device, s.op_inputs)
        moved = probe.bytes_moved(torch.Generator(device=s.device).manual_seed(0))  # the sets below: seeds from 0
        n = timing.rotation_sets(moved, l2, cfg.cold_l2_factor, cfg.max_graph_launches, cfg.mode == "cold")
        arglists = [a.args() for a in s.timer._local_sets(dims, dtype, n, 0)]

        def run_all() -> None:
            for args in arglists:
                b[1](args)
        try:
            (smp,), _ = timing.time_interleaved(s.clock, [run_all], cfg.warmup or 20, s.job.rep, n)
        except Exception as e:  # noqa: BLE001
            return f"; baseline {b[0]} failed to time: {str(e)[:100]}"
        return f"; baseline {b[0]} takes {smp.median:.2f} us there ({cfg.mode} L2)"

    def served_launcher(self, dims: dict[str, int], dtype: str,
                        same_function: bool) -> tuple[Baseline, Launcher] | None:
        """The baseline SGLang dispatches to for this shape, built (cached) here; None when the manifest states
        no serving rules, the original is what is served, or (``same_function``) it computes another function."""
        s = self.s
        if not states_serving(s.manifest):
            return None
        b = served_baseline(s.manifest, dims, dtype)
        if b is None or b.recipe is None or (same_function and not b.same_function):
            return None
        if isinstance(b.recipe, CudaJitRecipe) and dtype not in b.recipe.template_args:
            return None
        key = (b.name, dtype)
        if key not in self._served_fns:
            self._served_fns[key] = make_launcher(s.op_dir, s.manifest, dtype, recipe=b.recipe,
                                                  arch=s.cfg.arch, cache_dir=s.cfg.cache_dir)
        return b, self._served_fns[key]

    def served_run(self, case: CaseSpec, vals: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        """Outputs of the same-function kernel SGLang serves for a case the original refuses; None if none does
        (or it refuses the case as well)."""
        s = self.s
        served = self.served_launcher(case.dims, case.dtype, same_function=True)
        if served is None:
            return None
        b, launch = served
        a = ArgSet(s.manifest, case.dims, case.dtype, s.device, s.op_inputs)
        a.fill(case.distribution, None, vals)  # type: ignore[arg-type]
        try:
            ret = launch(a.args())
            s.clock.sync()
        except Exception as e:  # noqa: BLE001
            collect_launch_error(s.device)  # a refused launch leaves CUDA's flag for the next torch launch
            if poisons_context(e):
                raise
            return None
        if b.returns is None:
            outs = s.outs(ret, a)
        else:  # SGLang's eager fallback returns new tensors instead of writing in place
            seq = list(ret) if isinstance(ret, (tuple, list)) else [ret]
            outs = {n: a.tensors[n].view for n in s.compared}
            outs.update(dict(zip(b.returns, seq)))
        return {n: t.clone() for n, t in outs.items()}

    def served_fields(self, dims: dict[str, int], dtype: str, row: dict[str, Any],
                      stand_in: str | None) -> dict[str, Any]:
        """A timed row's comparison with what SGLang serves for the shape (nothing where the manifest is silent)."""
        if not states_serving(self.s.manifest):
            return {}
        b = served_baseline(self.s.manifest, dims, dtype)
        out: dict[str, Any] = {"served_by": b.name if b is not None else ORIGINAL}
        if stand_in is not None:
            out.update(original_refused=True, baseline_name=stand_in, baseline_us=row["original_us"])
            out["served_us"] = row["original_us"]
        elif b is None:
            out["served_us"] = row["original_us"]
        elif row.get("baseline_name") == b.name:
            out["served_us"] = row["baseline_us"]
        cand = row.get("candidate_us")
        if out.get("served_us") and cand:
            out["served_speedup"] = out["served_us"] / cand
        return out

