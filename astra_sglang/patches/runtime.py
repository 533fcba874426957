"""One patch inside a process: the guarded stand-in for SGLang's function, and its activation.

Why activation is lazy (at the first call the guard accepts, not at plugin load): SGLang loads plugins in
every process, including ones that never touch a GPU (launch_server's parent, the detokenizer); building and
checking there would create CUDA contexts and compile for nothing. The first accepted call happens in SGLang's
warm-up forward, before CUDA-graph capture; a first call that arrives *during* capture is served by the
original (checking would synchronise) and activation waits for a later call. ``activate()`` does it eagerly.

Hot path once active: adapter.prepare (host metadata only), guard (host metadata only), the kernel launch,
two int increments. No synchronisation, no allocation beyond the original's, so capture and replay work.
Under torch.compile tracing the original is used, so compiled graphs keep SGLang's custom ops.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from astra_sglang.contract.op import Manifest, complete_dims, signature_names
from astra_sglang.contract.patch import GuardSpec, PatchManifest
from astra_sglang.errors import AstraError
from astra_sglang.patches import status, status_file
from astra_sglang.patches.adapters import OpAdapter, Prepared, get_adapter, make_guard
from astra_sglang.patches.env import placebo_requested
from astra_sglang.patches.registry import device_problem, load_op, op_folder
from astra_sglang.platform_info import of_device

Original = Callable[..., Any]


def _compiling() -> Callable[[], bool]:
    import torch

    fn = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return fn if fn is not None else (lambda: False)


class PatchRuntime:
    """The guarded stand-in for one patch; ``hook_for(original)`` gives the function to install."""

    def __init__(self, patch_dir: Path, manifest: PatchManifest, adapter: OpAdapter | None = None,
                 op: Manifest | None = None):
        import torch

        self.patch_dir = Path(patch_dir)
        self.m = manifest
        self.op = op or load_op(manifest)
        self.adapter = adapter or get_adapter(manifest.op)
        names = list(self.adapter.tensor_names + self.adapter.scalar_names)
        if names != signature_names(self.op):
            raise AstraError(f"the {manifest.op} adapter passes {names}, the op signature is {signature_names(self.op)}")
        self.status = status.get(manifest.patch_id, manifest.op)
        interpret = manifest.source.kind == "triton" and os.environ.get("TRITON_INTERPRET") == "1"
        self.device_type = "cpu" if interpret else "cuda"
        self.guard = make_guard(manifest.guard, self.device_type)
        # per hook (the retune it stands in front of, "" alone): [guard in front, guard alone], the whole guard's
        # union until activation names the GPU, then that GPU's own boxes (_narrow; GuardSpec.gpu_regions)
        self._served: dict[str, list[Callable[[Prepared], bool]]] = {}
        self._gpu: tuple[str | None] | None = None  # (the GPU model,) once narrowed to it
        self.kernel: Callable[[dict[str, Any]], Any] | None = None
        self.originals: dict[str, Original] = {}
        self._lock = threading.Lock()
        self._capturing = torch.cuda.is_current_stream_capturing if torch.cuda.is_available() else (lambda: False)

    def guard_behind(self, inner: str) -> Callable[[Prepared], bool]:
        """The guard this patch serves in front of the patch ``inner`` ("" when it stands alone): its
        ``guard_in_front`` entry, else its own."""
        spec = self.m.guard_in_front.get(inner)
        return self.guard if spec is None else make_guard(spec, self.device_type)

    def _served_guards(self, inner: str) -> list[Callable[[Prepared], bool]]:
        if inner not in self._served:
            self._served[inner] = [self.guard_behind(inner), self.guard]
            if self._gpu is not None:  # hooked after activation: this GPU's boxes at once
                self._narrow(self._gpu[0])
        return self._served[inner]

    def _narrow(self, gpu: str | None) -> None:
        """Each hook's guards cut to the boxes measured on this GPU model, in place (the hot path holds the lists).
        Before activation a call is judged by the union, so that a call this GPU serves reaches the first-call
        check; from then on a shape that won on another GPU only goes to SGLang's kernel here."""
        def on(spec: GuardSpec) -> Callable[[Prepared], bool]:
            here = spec.on_gpu(gpu)
            return make_guard(here, self.device_type) if here is not None else _never

        for inner, guards in self._served.items():
            guards[:] = [on(self.m.guard_in_front.get(inner, self.m.guard)), on(self.m.guard)]
        self._gpu = (gpu,)

    # ------------------------------------------------------------------------------------------- hot path

    def hook_for(self, original: Original, target: str = "", passthrough: Callable[..., Any] | None = None,
                 behind: str = "") -> Callable[..., Any]:
        """The stand-in for ``original`` at ``target``. ``passthrough``: another op's stand-in on the same function
        (the two fused-MoE GEMMs share ``invoke_fused_moe_kernel``), which gets every call this adapter does not
        take as its form, whatever this patch's state; ``original`` stays SGLang's function, the one this patch
        falls back to and is checked against. ``behind``: the id of a patch of this same op (SGLang's kernel
        retuned) that ``passthrough`` is, standing behind this one ("" for none): it gets every call this patch
        does not serve (outside its guard, before its check, after a fallback), counted here as passed on and
        there as served; where the manifest has a guard for standing in front of it (``guard_in_front``), that one
        serves: the calls where the retune beat this patch go to the retune (decode attention at B 128, 2026-12-06)."""
        st = self.status
        prepare = self.adapter.prepare
        launch = self.adapter.launch
        guards = self._served_guards(behind)  # [front, alone]: narrowed to this GPU's boxes at activation
        # the guard in front holds only where the retune behind beat this patch: once the retune is out (measured
        # on another GPU, failed its check or build), SGLang's original stands behind, and this patch's own guard,
        # where it beat that original, serves (an H200 with `all`: the H100-measured retune stands aside, and the
        # rewrite had left it every LLaMA batch above 1, 1.58x at B 128 over SGLang's kernel, 2026-12-07)
        inner = status.get(behind) if behind else None
        stacked = bool(behind)
        compiling = _compiling()
        capturing = self._capturing
        tick = status_file.tick
        self.originals[target or getattr(original, "__qualname__", "original")] = original
        if target:
            st.targets = tuple(sorted(set(st.targets) | {target}))
        if placebo_requested():  # read once here, so the patch's own hot path below gains no check
            return self._named(self._placebo_hook(original, passthrough, behind), original)

        def astra_patched(*args: Any, **kwargs: Any) -> Any:
            live = st.state in ("active", "pending")
            if (live or passthrough is not None) and not compiling():
                try:
                    p = prepare(*args, **kwargs)
                except TypeError:  # a call form the adapter does not know: the original's business
                    p = None
                except Exception as e:
                    if live:
                        self.fail(f"exception in the guard ({type(e).__name__}: {e})")
                    p = None
                if p is None and passthrough is not None and not stacked:  # another form: the next stand-in's
                    return passthrough(*args, **kwargs)
                pick = 0 if inner is None or inner.state in ("active", "pending") else 1
                if p is not None and live and guards[pick](p) and (
                        st.state == "active" or (self._activate_on(p, original) and guards[pick](p))):
                    try:
                        ret = launch(self.kernel, p)  # type: ignore[arg-type]
                    except Exception as e:
                        self.fail(f"exception at call time ({type(e).__name__}: {e}); patch disabled")
                    else:
                        st.served_by_patch += 1
                        if capturing():
                            st.captured_by_patch += 1
                        tick()
                        return ret
            if stacked:  # not this patch's call: the same op's patch behind it serves it or hands it to SGLang
                st.passed_on += 1
                tick()
                return passthrough(*args, **kwargs)  # type: ignore[misc]
            st.served_by_original += 1
            if capturing():
                st.captured_by_original += 1
            tick()
            return original(*args, **kwargs)

        return self._named(astra_patched, original)

    def _placebo_hook(self, original: Original, passthrough: Callable[..., Any] | None = None,
                      behind: str = "") -> Callable[..., Any]:
        """The e2e placebo (ASTRA_SGLANG_PLACEBO): the host work the patch's hook does on every call (the
        adapter's prepare and the guard, results discarded; the counters and the status tick), then SGLang's
        original. Nothing is built, checked or launched, so a placebo process runs SGLang's kernels, and its
        difference from a process without hooks is what the hooks themselves cost."""
        st = self.status
        st.reason = "placebo: hooks installed, SGLang's original serves every call"
        prepare = self.adapter.prepare
        guard = self.guard_behind(behind)
        stacked = bool(behind)
        compiling = _compiling()
        capturing = self._capturing
        tick = status_file.tick

        def astra_placebo(*args: Any, **kwargs: Any) -> Any:
            if not compiling():
                try:
                    p = prepare(*args, **kwargs)
                    if p is not None:
                        guard(p)
                except Exception:  # the patch would have fallen back here too; the original serves either way
                    p = None
                if p is None and passthrough is not None and not stacked:
                    return passthrough(*args, **kwargs)
            if stacked:  # the placebo behind it does its own host work, then SGLang's original serves
                st.passed_on += 1
                tick()
                return passthrough(*args, **kwargs)  # type: ignore[misc]
            st.served_by_original += 1
            if capturing():
                st.captured_by_original += 1
            tick()
            return original(*args, **kwargs)

        return astra_placebo

    def _named(self, hook: Callable[..., Any], original: Original) -> Callable[..., Any]:
        hook.__qualname__ = hook.__name__ = f"astra_patched_{self.m.op}"
        hook.__doc__ = f"astra-sglang patch {self.m.patch_id} (falls back to {original!r})"
        hook.astra_patch_id = self.m.patch_id  # type: ignore[attr-defined]
        hook.astra_original = original  # type: ignore[attr-defined]
        return hook

    def fail(self, reason: str, state: status.State = "failed") -> None:
        status.fail(self.m.patch_id, reason, self.m.op, state)
        status_file.write_now()

    # ----------------------------------------------------------------------------------------- activation

    def _activate_on(self, p: Prepared, original: Original) -> bool:
        if self._capturing():
            return False  # never build or check inside CUDA-graph capture
        return self.activate(p.tensors[0].device, original)

    def activate(self, device: Any = None, original: Original | None = None) -> bool:
        """Check arch, build/load the kernel, compare it with the original on the covered shapes."""
        with self._lock:
            st = self.status
            if st.state != "pending":
                return st.state == "active"
            ok = self._activate(st, device, original)
            after: str = st.state  # _activate changed it: not the "pending" narrowed above
            verdict = "passed" if ok else "not applicable" if after == "inapplicable" else "failed"
            st.first_call_check = f"{verdict}: {st.reason}"
        status_file.write_now()
        return ok

    def _activate(self, st: status.PatchStatus, device: Any, original: Original | None) -> bool:
        if original is None:
            if not self.originals:
                self.fail("no original function to check against")
                return False
            original = next(iter(self.originals.values()))
        if device is None:
            device = self.device_type
        try:
            here = of_device(device)
        except Exception as e:
            self.fail(f"cannot query the device ({type(e).__name__}: {e})")
            return False
        problem = device_problem(self.m, here.arch, here.gpu)
        if problem:
            self.fail(problem, "inapplicable")
            return False
        self._narrow(here.gpu)
        from astra_sglang.patches.kernels import load_kernel

        try:
            self.kernel = load_kernel(self.patch_dir, self.m, self.op, dtypes=self.m.guard.dtypes,
                                      arch=here.build_target)
        except Exception as e:
            self.fail(f"build failed: {_one_line(e)}")
            return False
        try:
            mismatch = check_against_original(self, original, device)
        except Exception as e:
            self.fail(f"check raised {type(e).__name__}: {_one_line(e)}")
            return False
        if mismatch:
            self.fail(f"check mismatch against SGLang's original: {mismatch}")
            return False
        st.state = "active"
        st.reason = f"checked on {here.arch} against {getattr(original, '__module__', '?')}"
        return True

    def serve(self, *args: Any, **kwargs: Any) -> Any:
        """Run the kernel path for a call the guard accepted (checks and tests)."""
        p = self.adapter.prepare(*args, **kwargs)
        if p is None or not self.guard(p):
            raise ValueError("call outside the patch's guard")
        assert self.kernel is not None
        return self.adapter.launch(self.kernel, p)


def _never(p: Prepared) -> bool:
    """The guard on a GPU where the patch won nowhere it was measured."""
    return False


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:300] + ("..." if len(text) > 300 else "")


def check_against_original(rt: PatchRuntime, original: Original, device: Any) -> str | None:
    """Compare the kernel with the original on every covered (shape, dtype) of the manifest, each shape in every
    form a server calls it in (``OpAdapter.served_forms``); None = same.

    The harness's checker and the op manifest's tolerances, so a patch passes here exactly what it passed
    there: relative per dtype, poison-aware (outputs the kernel does not write keep the poison and fail), and
    against the op's float reference with its ``name:scale`` magnitudes. Each side, and the reference, gets
    its own identical fresh inputs (same seed), so in-place ops cannot see each other's results.
    """
    import torch

    from astra_sglang.checker import compare_outputs
    from astra_sglang.loader.launch import load_reference

    m, ad, op = rt.m, rt.adapter, rt.op
    reference = load_reference(op_folder(m.op), op)
    n = 0
    for dtype_name in m.guard.dtypes:
        tol = op.tolerances.get(dtype_name)
        if tol is None:
            return f"the op manifest has no tolerance for {dtype_name}"
        dtype = getattr(torch, dtype_name)
        # shapes recorded before a dim was added keep their meaning; each in every layout a call is served in
        forms = [(i, form) for i, dims in enumerate(m.check_shapes) for form in ad.served_forms(complete_dims(op, dims))]
        for i, dims in forms:
            if not all(r.accepts(dims[k]) for k, r in m.guard.dims.items() if k in dims):
                continue
            seed = 1234 + i
            a_o, k_o = ad.sample(dims, dtype, device, seed)
            a_p, k_p = ad.sample(dims, dtype, device, seed)
            p = ad.prepare(*a_p, **k_p)
            if p is None or not rt.guard(p):
                continue
            a_r, k_r = ad.sample(dims, dtype, device, seed)
            p_r = ad.prepare(*a_r, **k_r)
            assert p_r is not None
            ref = reference(**p_r.args)
            ret_o = original(*a_o, **k_o)
            ret_p = ad.launch(rt.kernel, p)  # type: ignore[arg-type]
            bad = compare_outputs(ad.outputs(a_p, k_p, ret_p), ad.outputs(a_o, k_o, ret_o), ref, tol)
            if bad is not None:
                return f"at {dims} {dtype_name}: {bad.detail}"
            n += 1
    if n == 0:
        return "no covered check shape (check_shapes vs guard)"
    return None
