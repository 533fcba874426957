"""The isolated worker: loads one candidate next to the original, checks it, times it, reports, exits.

Started by ``isolation.run_worker`` as ``python -m astra_sglang.harness.worker RFD WFD`` with the job on a
pipe (not a file: held-out cases never touch disk). A crash, hang or poisoned CUDA context kills only this
process. Within it, the order of work keeps the candidate away from answers: for each case the candidate runs
first, on fresh buffers, before the original has computed that case and before the reference exists; its
outputs are copied out before anything else runs; it runs again after the original, at new addresses.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable, Optional

import torch

if torch.cuda.is_available() and os.environ.get("ASTRA_WORKER_DEVICE") == "cuda":
    from astra_sglang.harness import (
        timing,  # binds the timer primitives before any candidate is imported
    )
elif os.environ.get("ASTRA_HARNESS_SIMULATE_TIMING") == "1":
    from astra_sglang.harness import timing_sim as timing  # type: ignore[no-redef]
else:
    timing = None  # type: ignore[assignment]

from astra_sglang.checker import Mismatch, compare, compare_to_reference, scale_key
from astra_sglang.contract.op import Manifest, Tolerance, signature_names
from astra_sglang.harness.suite import Case
from astra_sglang.harness.tensors import ArgSet
from astra_sglang.loader.launch import compile_call, load_reference, make_launcher

_CUDA_STICKY = ("illegal memory access", "illegal address", "unspecified launch failure", "misaligned address",
                "device-side assert", "an illegal instruction", "CUDA error")


class CaseFailure(Exception):
    def __init__(self, failure: dict[str, Any]):
        super().__init__(failure.get("detail", ""))
        self.failure = failure


class Skip(Exception):
    """The original itself refuses this case (e.g. a width its kernel does not support)."""


class Worker:
    def __init__(self, job: dict[str, Any], send: Callable[[str, Any], None]):
        self.job = job
        self.send = send
        self.manifest = Manifest.model_validate_json(job["manifest"])
        self.op_dir = Path(job["op_dir"])
        self.device: str = job["device"]
        self.cfg: dict[str, Any] = job["config"]
        self.candidate: Optional[Path] = Path(job["candidate"]) if job["candidate"] else None
        self._orig: dict[str, Callable[[dict[str, Any]], Any]] = {}
        self._cand: dict[str, Callable[[dict[str, Any]], Any]] = {}
        self.reference = load_reference(self.op_dir, self.manifest)
        recipe = self.manifest.recipe
        call_names = compile_call(recipe.call, signature_names(self.manifest)).names()
        tensors = self.manifest.signature.tensors
        self.returned = [t.name for t in tensors if t.role == "output" and t.name not in call_names]
        self.compared = [t.name for t in tensors if t.role in ("output", "inplace")]
        self.inputs = [t.name for t in tensors if t.role == "input"]
        self.notes: list[str] = []
        self.skipped = 0

    # -- loading -------------------------------------------------------------------------------------------
    def _launcher(self, dtype: str, candidate: bool) -> Callable[[dict[str, Any]], Any]:
        cache = self._cand if candidate else self._orig
        if dtype not in cache:
            src = self.candidate if candidate else None
            kw = dict(cache_dir=Path(self.job["cache_dir"]) if self.job.get("cache_dir") else None,
                      arch=self.job["arch"]) if self.manifest.source_kind == "cuda_jit" else {}
            cache[dtype] = make_launcher(self.op_dir, self.manifest, dtype, kernel_source=src, **kw)
        return cache[dtype]

    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    # -- one run ---------------------------------------------------------------------------------------------
    def _run(self, launch: Callable[[dict[str, Any]], Any], a: ArgSet) -> dict[str, torch.Tensor]:
        ret = launch(a.args())
        self._sync()
        outs = {n: a.tensors[n].view for n in self.compared if n not in self.returned}
        if self.returned:
            seq = list(ret) if isinstance(ret, (tuple, list)) else [ret]
            if isinstance(ret, dict):
                seq = [ret[n] for n in self.returned]
            for n, t in zip(self.returned, seq):
                outs[n] = t
        return outs

    def _fail(self, case: Case, reason: str, detail: str, tensor: Optional[str] = None,
              m: Optional[Mismatch] = None) -> CaseFailure:
        f = dict(reason=reason, detail=detail, dims=dict(case.dims), dtype=case.dtype,
                 distribution=case.distribution, seed=case.seed, tensor=tensor, heldout=case.heldout)
        if m is not None:
            f.update(max_abs_err=m.max_abs_err, max_rel_err=m.max_rel_err)
        if case.heldout:  # never reveal a held-out shape or seed to whoever reads the result
            f.update(dims={}, seed=None, detail=f"{reason} on a held-out case", tensor=None)
        return CaseFailure(f)

    def _cand_run(self, case: Case, vals: dict[str, torch.Tensor], label: str,
                  finite_prefill: bool = False) -> tuple[ArgSet, dict[str, torch.Tensor]]:
        a = ArgSet(self.manifest, case.dims, case.dtype, self.device)
        a.fill(case.distribution, None, vals)  # type: ignore[arg-type]
        if finite_prefill:
            a.fill_outputs(finite=True)
        try:
            outs = self._run(self._launcher(case.dtype, True), a)
        except Exception as e:  # noqa: BLE001 - any failure of candidate code is its verdict
            raise self._launch_error(case, e, label) from None
        for name, g in a.tensors.items():
            if not g.guards_intact():
                raise self._fail(case, "out-of-bounds write", f"{label}: memory next to {name!r} was written",
                                 tensor=name)
        for name in self.inputs:
            if not torch.equal(_bits(a.tensors[name].view), _bits(vals[name])):
                raise self._fail(case, "input mutated", f"{label}: input {name!r} changed", tensor=name)
        return a, {n: t.clone() for n, t in outs.items()}

    def _launch_error(self, case: Case, e: BaseException, label: str) -> CaseFailure:
        msg = f"{type(e).__name__}: {e}".strip()
        sticky = any(s in msg for s in _CUDA_STICKY)
        f = self._fail(case, "launch error", f"{label}: {msg[:2000]}")
        f.failure["sticky"] = sticky
        return f

    def _orig_run(self, case: Case, vals: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        a = ArgSet(self.manifest, case.dims, case.dtype, self.device)
        a.fill(case.distribution, None, vals)  # type: ignore[arg-type]
        try:
            outs = self._run(self._launcher(case.dtype, False), a)
        except Exception as e:  # noqa: BLE001
            if any(s in str(e) for s in _CUDA_STICKY):
                raise
            raise Skip(f"original refuses {case.dims} {case.dtype}: {str(e)[:300]}") from None
        return {n: t.clone() for n, t in outs.items()}

    def _reference(self, case: Case, vals: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        a = ArgSet(self.manifest, case.dims, case.dtype, self.device)
        a.fill(case.distribution, None, vals)  # type: ignore[arg-type]
        return self.reference(**a.args())

    def _check(self, case: Case, outs: dict[str, torch.Tensor], orig: dict[str, torch.Tensor],
               ref: dict[str, torch.Tensor]) -> Optional[tuple[str, Mismatch]]:
        tol = self.manifest.tolerances[case.dtype]
        if case.distribution == "tiny":  # values ~1e-3: an absolute tolerance made for values ~1 would accept 0
            tol = Tolerance(atol=tol.atol * 1e-3, rtol=tol.rtol)
        for name in self.compared:
            m = compare(name, outs[name], orig[name], ref.get(name), tol, ref.get(scale_key(name)))
            if m is not None:
                return name, m
        return None

    def _values(self, case: Case, seed: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator(device=self.device).manual_seed(seed)
        a = ArgSet(self.manifest, case.dims, case.dtype, self.device)
        a.fill(case.distribution, gen)
        return a.values()

    # -- correctness -------------------------------------------------------------------------------------
    def check_case(self, case: Case) -> None:
        vals = self._values(case, case.seed)
        if self.candidate is None:
            orig = self._orig_run(case, vals)
            ref = self._reference(case, vals)
            for name in self.compared:
                if name in ref:
                    m = compare_to_reference(name, orig[name], ref[name], self.manifest.tolerances[case.dtype],
                                             ref.get(scale_key(name)))
                    if m is not None:
                        raise self._fail(case, m.reason, f"original: {m.detail}", name, m)
            return
        try:
            keep1, first = self._cand_run(case, vals, "first run (before the original)")
        except CaseFailure as f:
            if f.failure["reason"] == "launch error" and not f.failure.get("sticky"):
                self._orig_run(case, vals)  # raises Skip when the original refuses this case as well
            raise
        orig = self._orig_run(case, vals)
        keep2, second = self._cand_run(case, vals, "second run (after the original)")
        ref = self._reference(case, vals)
        for label, outs in (("first run", first), ("second run", second)):
            bad = self._check(case, outs, orig, ref)
            if bad is not None:
                raise self._diagnose(case, vals, orig, ref, label, *bad, keep=(keep1, keep2))

    def _diagnose(self, case: Case, vals: dict[str, torch.Tensor], orig: dict[str, torch.Tensor],
                  ref: dict[str, torch.Tensor], label: str, name: str, m: Mismatch, keep: Any) -> CaseFailure:
        """Name the cause: history-dependent (stateful), never-written, or NaN from reading the output buffer."""
        pad = torch.empty(1 + (case.seed % 977) * 64, dtype=torch.uint8, device=self.device)  # new addresses
        _, again = self._cand_run(case, vals, "diagnostic re-run")
        del pad
        if self._check(case, again, orig, ref) is None:
            return self._fail(case, "stateful", f"{label}: {m.detail}; the same inputs at new addresses give the "
                              "right answer: the output depends on earlier calls or on addresses (state kept "
                              "between calls) or is nondeterministic", name, m)
        if m.reason in ("nan", "unwritten output"):
            _, fin = self._cand_run(case, vals, "diagnostic re-run (finite prefill)", finite_prefill=True)
            out = fin[name]
            if out.dtype.is_floating_point and bool(((out == 1234.5) & (orig[name] != 1234.5)).any()):
                return self._fail(case, "unwritten output", f"{label}: {m.detail}; with a finite prefill those "
                                  "elements keep the prefill: never written", name, m)
            return self._fail(case, "nan", f"{label}: {m.detail}", name, m)
        return self._fail(case, m.reason, f"{label}: {m.detail}", name, m)

    def stateful_check(self, case: Case) -> None:
        """Same buffers, new values: a result cached by pointer (or by anything but the data) shows up here."""
        a = ArgSet(self.manifest, case.dims, case.dtype, self.device)
        launch = self._launcher(case.dtype, True)
        for k in range(2):
            vals = self._values(case, case.seed + 7919 * (k + 1))
            a.fill(case.distribution, None, vals)  # type: ignore[arg-type]
            try:
                outs = self._run(launch, a)
            except Exception as e:  # noqa: BLE001
                raise self._launch_error(case, e, "same-address re-run") from None
            orig = self._orig_run(case, vals)
            ref = self._reference(case, vals)
            bad = self._check(case, {n: t.clone() for n, t in outs.items()}, orig, ref)
            if bad is not None and k > 0:
                raise self._fail(case, "stateful", f"same input addresses, new values: {bad[1].detail} (the "
                                 "candidate returns a result kept from an earlier call)", bad[0], bad[1])
            if bad is not None:
                raise self._fail(case, bad[1].reason, bad[1].detail, bad[0], bad[1])

    # -- timing ------------------------------------------------------------------------------------------
    def time_shape(self, dims: dict[str, int], dtype: str, ceiling: float, l2: int) -> dict[str, Any]:
        cfg = self.cfg
        probe = ArgSet(self.manifest, dims, dtype, self.device)
        bytes_moved = probe.bytes_moved()
        del probe
        cold = cfg["mode"] == "cold"
        n_sets = timing.rotation_sets(bytes_moved, l2, cfg["cold_l2_factor"], cfg["max_graph_launches"], cold)
        per_replay = n_sets if cold else cfg["warm_launches"]
        case = Case(dict(dims), dtype, "normal", int(cfg["timing_seed"]))
        self._orig_run(case, self._values(case, case.seed))  # Skip (not timed) if the original refuses the shape
        impls: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [("original", self._launcher(dtype, False))]
        if self.candidate is not None:
            impls.append(("candidate", self._launcher(dtype, True)))
        baseline = self._baseline(dtype, dims)
        if baseline is not None:
            impls.append(baseline)
        sets: dict[str, list[ArgSet]] = {}
        for label, _ in impls:
            sets[label] = []
            for i in range(n_sets):
                a = ArgSet(self.manifest, dims, dtype, self.device)
                a.fill("normal", torch.Generator(device=self.device).manual_seed(case.seed + i))
                sets[label].append(a)

        def body(launch: Callable[[dict[str, Any]], Any], argsets: list[ArgSet]) -> Callable[[], None]:
            arglists = [a.args() for a in argsets] if cold else [argsets[0].args()] * per_replay

            def run_all() -> None:
                for args in arglists:
                    launch(args)
            return run_all

        warmup, rep = cfg["warmup"], cfg["rep"]
        graphs, method = [], "cuda-graph replay"
        try:
            graphs.append(timing.capture(body(impls[0][1], sets["original"])))
        except Exception as e:  # noqa: BLE001 - the original cannot be captured: time eagerly, both sides
            self.notes.append(f"original not capturable ({str(e)[:200]}); eager timing with full synchronisation")
            graphs = []
        if graphs and self.candidate is not None:
            try:
                graphs.append(timing.capture(body(impls[1][1], sets["candidate"])))
            except Exception as e:  # noqa: BLE001
                raise self._fail(case, "launch error", f"CUDA-graph capture of the candidate failed: "
                                 f"{type(e).__name__}: {str(e)[:1000]} (SGLang replays kernels in CUDA graphs)")
        if graphs and baseline is not None:
            try:
                graphs.append(timing.capture(body(baseline[1], sets[baseline[0]])))
            except Exception as e:  # noqa: BLE001
                self.notes.append(f"baseline {baseline[0]} not capturable: {str(e)[:200]}")
                impls.pop()
        if graphs:
            samples = timing.time_graphs(graphs, per_replay, warmup, rep)
        else:
            method = "eager, all streams synchronised before each end event"
            samples = timing.time_eager([body(f, sets[lab]) for lab, f in impls], warmup, rep)
            samples = [timing.Samples([u / per_replay for u in s.us]) for s in samples]
        self._sync()
        if self.candidate is not None:
            self.after_timing_check(case, sets["candidate"][0], graphs[1] if graphs else None)
        orig_us = samples[0].median
        cand_us = samples[1].median if self.candidate is not None else None
        spread = max(s.spread_pct for s in samples[: 2 if self.candidate is not None else 1])
        gbps = lambda us: bytes_moved / (us * 1e-6) / 1e9  # noqa: E731
        res: dict[str, Any] = dict(dims=dims, dtype=dtype, original_us=orig_us, spread_pct=spread,
                                   bytes_moved=bytes_moved, original_gbps=gbps(orig_us),
                                   original_pct_ceiling=100.0 * gbps(orig_us) / ceiling,
                                   rotation_bytes=bytes_moved * (n_sets if cold else 1), samples=rep,
                                   method=method)
        if baseline is not None and len(samples) == len(impls):
            res.update(baseline_name=baseline[0], baseline_us=samples[-1].median)
        if cand_us is not None:
            speedup = orig_us / cand_us
            suspect = gbps(cand_us) > ceiling * (1 + cfg["suspect_margin"])
            res.update(candidate_us=cand_us, speedup=speedup, candidate_gbps=gbps(cand_us),
                       candidate_pct_ceiling=100.0 * gbps(cand_us) / ceiling,
                       verdict=timing.verdict(speedup, max(spread, cfg["min_change_pct"]), suspect))
            if suspect:
                res["suspect_reason"] = (f"candidate at {gbps(cand_us):.0f} GB/s exceeds the measured copy ceiling "
                                         f"{ceiling:.0f} GB/s by more than {100 * cfg['suspect_margin']:.0f}%")
        del graphs, sets
        if self.device == "cuda":
            torch.cuda.empty_cache()
        return res

    def _baseline(self, dtype: str, dims: dict[str, int]) -> Optional[tuple[str, Callable[[dict[str, Any]], Any]]]:
        """The library kernel SGLang really serves with (e.g. FlashInfer's), timed beside the original."""
        if not self.cfg.get("time_baselines"):
            return None
        for b in self.manifest.baselines:
            if b.name not in self.job.get("baselines", []) or dtype not in getattr(b.recipe, "template_args", {}):
                continue
            try:
                launch = make_launcher(self.op_dir, self.manifest, dtype, recipe=b.recipe, arch=self.job["arch"],
                                       cache_dir=Path(self.job["cache_dir"]) if self.job.get("cache_dir") else None)
                probe = ArgSet(self.manifest, dims, dtype, self.device)
                probe.fill("normal", torch.Generator(device=self.device).manual_seed(1))
                self._run(launch, probe)
            except Exception as e:  # noqa: BLE001 - a baseline that refuses a shape is simply not timed there
                if any(s in str(e) for s in _CUDA_STICKY):
                    raise
                continue
            return b.name, launch
        return None

    def _baseline_alone(self, dims: dict[str, int], dtype: str, l2: int) -> str:
        """Where the original refuses a shape, what SGLang's library path takes there (a note, not a row)."""
        b = self._baseline(dtype, dims)
        if b is None:
            return ""
        cfg = self.cfg
        probe = ArgSet(self.manifest, dims, dtype, self.device)
        n = timing.rotation_sets(probe.bytes_moved(), l2, cfg["cold_l2_factor"], cfg["max_graph_launches"],
                                 cfg["mode"] == "cold")
        sets = [ArgSet(self.manifest, dims, dtype, self.device) for _ in range(n)]
        for i, a in enumerate(sets):
            a.fill("normal", torch.Generator(device=self.device).manual_seed(i))
        arglists = [a.args() for a in sets]

        def run_all() -> None:
            for args in arglists:
                b[1](args)
        try:
            (smp,) = timing.time_graphs([timing.capture(run_all)], n, cfg["warmup"], cfg["rep"])
        except Exception as e:  # noqa: BLE001
            return f"; baseline {b[0]} failed to time: {str(e)[:100]}"
        return f"; baseline {b[0]} takes {smp.median:.2f} us there ({cfg['mode']} L2)"

    def after_timing_check(self, case: Case, a: ArgSet, graph: Any) -> None:
        """The timed runs must compute the function: replay the timed graph on new values in the same buffers,
        then call the candidate eagerly on the same addresses with new values again."""
        if self.cfg["mode"] == "warm" and any(t.role == "inplace" for t in self.manifest.signature.tensors):
            graph = None  # a warm replay applies an in-place op several times to one buffer: not one call's result
        steps = (("timed graph replay", graph), ("eager call at the timed addresses", None))
        for k, (label, g) in enumerate(steps):
            if label.startswith("timed") and g is None:
                continue
            vals = self._values(case, case.seed + 104729 * (k + 1))
            a.fill("normal", None, vals)  # type: ignore[arg-type]
            try:
                if g is not None:
                    timing._replay(g)
                    self._sync()
                    outs = {n: a.tensors[n].view for n in self.compared if n not in self.returned}
                else:
                    outs = self._run(self._launcher(case.dtype, True), a)
            except Exception as e:  # noqa: BLE001
                raise self._launch_error(case, e, f"after timing ({label})") from None
            if self.returned and g is not None:
                continue  # outputs returned by value are not observable from a replay
            orig = self._orig_run(case, vals)
            ref = self._reference(case, vals)
            bad = self._check(case, {n: t.clone() for n, t in outs.items()}, orig, ref)
            if bad is not None:
                reason = "timed run wrong" if g is not None else "stateful"
                raise self._fail(case, reason, f"after timing, {label} with new values: {bad[1].detail}"
                                 + (" (the captured graph does not compute the function: work hidden from the "
                                    "capture stream or skipped)" if g is not None else ""), bad[0], bad[1])

    # -- the job -----------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        out: dict[str, Any] = {"device": "cpu (TRITON_INTERPRET=1)", "notes": self.notes}
        cases = [Case(**{**c, "tags": tuple(c["tags"])}) for c in self.job["cases"]]
        try:
            for dt in sorted({c.dtype for c in cases}):
                self._launcher(dt, False)
                if self.candidate is not None:
                    self._launcher(dt, True)
        except Exception as e:  # noqa: BLE001 - a candidate that does not load/import failed to build
            out["build_error"] = f"{type(e).__name__}: {e}"
            return out
        timed = self.device == "cuda" or bool(self.cfg.get("simulate_timing"))
        if timed:
            out["device"] = timing.device_name()
            self.send("progress", {"step": "warm-up"})
            timing.warm_gpu(self.cfg["gpu_warmup_s"])
            ceiling = self.job.get("ceiling") or timing.copy_ceiling_gbps()
            out["ceiling"] = ceiling
            out["l2"] = timing.l2_bytes()
        run = heldout = 0
        failure: Optional[dict[str, Any]] = None
        try:
            for i, case in enumerate(cases):
                self.send("progress", {"step": "check", "index": i, "heldout": case.heldout,
                                       "case": None if case.heldout else case.as_dict()})
                try:
                    self.check_case(case)
                except Skip as s:
                    self.skipped += 1
                    if len(self.notes) < 20 and not case.heldout:
                        self.notes.append(str(s))
                    continue
                run += 1
                heldout += int(case.heldout)
            if self.candidate is not None:
                visible = sorted((c for c in cases if not c.heldout and c.distribution == "normal"),
                                 key=lambda c: _numel(c.dims))
                for case in visible[: int(self.cfg["stateful_checks"])]:
                    self.send("progress", {"step": "stateful", "case": case.as_dict()})
                    try:
                        self.stateful_check(case)
                    except Skip:
                        continue
        except CaseFailure as f:
            failure = f.failure
        out["correctness"] = dict(ok=failure is None, cases_run=run, heldout_cases_run=heldout,
                                  first_failure=failure, skipped_cases=self.skipped)
        # the original alone off its reference is a finding about the extraction: report it, still time it
        finding = self.candidate is None and failure is not None and failure["reason"] == "reference mismatch"
        if (failure is not None and not finding) or not timed or not self.cfg["timing"]:
            return out
        shapes = []
        try:
            for dims in self.job["timed_shapes"]:
                for dt in self.job["timing_dtypes"]:
                    self.send("progress", {"step": "time", "dims": dims, "dtype": dt})
                    try:
                        shapes.append(self.time_shape(dims, dt, out["ceiling"], out["l2"]))
                    except Skip as s:
                        self.notes.append(f"not timed: {s}{self._baseline_alone(dims, dt, out['l2'])}")
        except CaseFailure as f:
            out["correctness"].update(ok=False, first_failure=f.failure)
            return out
        except Skip as s:  # pragma: no cover - Skip is handled per shape above
            self.notes.append(str(s))
        out["timing"] = shapes
        return out


def _bits(x: torch.Tensor) -> torch.Tensor:
    from astra_sglang.checker import bits

    return bits(x)


def _numel(dims: dict[str, int]) -> int:
    n = 1
    for v in dims.values():
        n *= v
    return n


def main(argv: list[str]) -> None:
    faulthandler.enable()
    rfd, wfd = int(argv[0]), int(argv[1])
    conn_in, conn_out = Connection(rfd, writable=False), Connection(wfd, readable=False)

    def send(kind: str, payload: Any) -> None:
        conn_out.send((kind, payload))

    job = conn_in.recv()
    send("progress", {"step": "started"})
    try:
        result = Worker(job, send).run()
        send("result", result)
    except BaseException as e:  # noqa: BLE001 - report anything, then exit; the parent decides the verdict
        send("error", {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-4000:]})
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # no interpreter teardown: stray candidate threads or a dead CUDA context cannot hang us


if __name__ == "__main__":
    main(sys.argv[1:])
