"""What the plugin must know about one op to stand in for SGLang's function at a call site.

An adapter restates the original function's calling convention: which call forms it can serve (``prepare``
returns None for the rest, e.g. MoE calls with ``expert_ids``), the tensors and symbolic dims the guard
checks, how to call a kernel with canonical argument names, what to return, and how to make sample inputs
for the load-time check. ``prepare`` must not allocate device memory: the guard runs after it, and a call
the guard refuses goes to the original, which allocates what it needs itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from astra_sglang.contract.patch import DimRange, GuardSpec

Args = dict[str, Any]


@dataclass
class Prepared:
    """A call the adapter can serve: canonical args, the tensors and dims the guard checks."""

    args: Args
    tensors: tuple[Any, ...]
    dims: dict[str, int]


class OpAdapter:
    op: str = ""
    #: the names of ``Prepared.args``: the extracted op signature's tensors and scalars, in order (checked
    #: against the op manifest when a patch is prepared; a mismatch is refused rather than guessed)
    tensor_names: tuple[str, ...] = ()
    scalar_names: tuple[str, ...] = ()
    #: set when the function serves several ops, one call form each (``invoke_fused_moe_kernel``: the w1 and w2
    #: GEMMs): adapters naming the same function here take disjoint forms, so their patches may be chained on it
    call_form_of: str | None = None
    #: dims that size a call's work but that the guard cannot see at call time (decode attention's KV length S
    #: lives on the GPU, and a decode graph is captured per batch size): a guard point serves every value of them,
    #: so `patches coverage` says where a call's value lies outside those its records measured at that point
    unseen_sizes: tuple[str, ...] = ()
    #: the attention backends whose forward calls this op (empty: any backend): a server on another backend never
    #: reaches the patch (decode_attention_fwd is the triton backend's; a default H100/H200 server runs fa3)
    backends: tuple[str, ...] = ()

    def resized(self, dims: dict[str, int], name: str, value: int) -> dict[str, int]:
        """A contract shape with the unseen size ``name`` set to ``value``, the dims that follow from it moved
        with it (the same server at another context: ``patches verify --record`` times these twins)."""
        return {**dims, name: value}

    def served_forms(self, dims: dict[str, int]) -> list[dict[str, int]]:
        """``dims`` and each other form of the same call that ``prepare`` hands the kernel as it is (decode
        attention under CUDA graphs: q a view of LLaMA's qkv rows, dim QS; kv_indices the graph buffer, dim KX):
        the first-call check and the device check run every form a call can be served in, not only the check
        shape's own, or a kernel wrong only in the served form would pass the check and serve wrong tokens."""
        return [dims]

    def prepare(self, *args: Any, **kwargs: Any) -> Prepared | None:
        raise NotImplementedError

    def launch(self, kernel: Callable[[Args], Any], p: Prepared) -> Any:
        """Run the kernel for a prepared call and return exactly what the original returns."""
        raise NotImplementedError

    def sample(self, dims: dict[str, int], dtype: Any, device: Any, seed: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """(args, kwargs) of a call to the ORIGINAL's signature, fresh tensors every time."""
        raise NotImplementedError

    def outputs(self, args: tuple[Any, ...], kwargs: dict[str, Any], ret: Any) -> dict[str, Any]:
        """Every tensor the call writes (outputs and in-place arguments), by name."""
        raise NotImplementedError

    # defaults for `patches add`
    def default_guard(self) -> GuardSpec:
        raise NotImplementedError

    def default_check_shapes(self) -> list[dict[str, int]]:
        """The op contract's own shapes, the smallest three (by the bytes one call moves): the first-call check runs
        in every server process before the first call is served, so it must be cheap, and a contract shape is one
        the harness checked every candidate on. ``patches add`` moves them inside the patch's guard. An adapter
        whose sample needs smaller dims than any contract shape (decode_attention's KV pools) gives its own."""
        from astra_sglang.contract.op import load_manifest
        from astra_sglang.harness.shared.suite import contract_bytes, total_numel
        from astra_sglang.patches.registry import op_folder

        op = load_manifest(op_folder(self.op))
        dtype = op.signature.dtypes[0]
        # an op whose traffic counts drawn values (a MoE GEMM's touched experts) has no count from dims: its size
        sized = sorted(((contract_bytes(op, s.dims, dtype) or total_numel(op, s.dims), i)
                        for i, s in enumerate(op.shapes)))
        out: list[dict[str, int]] = []
        for _, i in sized:
            if op.shapes[i].dims not in out:
                out.append(dict(op.shapes[i].dims))
            if len(out) == 3:
                break
        return out


def make_guard(spec: GuardSpec, device_type: str) -> Callable[[Prepared], bool]:
    """Compile the guard spec into a host-only predicate: dtype, device, contiguity, alignment, dims.

    Reads only tensor metadata (``dtype``, ``device``, ``data_ptr()``, strides): no synchronisation, legal
    inside CUDA-graph capture.
    """
    import torch

    dtypes = frozenset(getattr(torch, d) for d in spec.dtypes)
    align = max(1, spec.align_bytes)
    contiguous = spec.contiguous
    big = 1 << 62
    ranges = [(name, r.min, r.max if r.max is not None else big, r.multiple_of) for name, r in spec.dims.items()]
    boxes = [[(name, r.min, r.max if r.max is not None else big, r.multiple_of) for name, r in box.items()]
             for box in spec.regions]

    def inside(dims: dict[str, int], box: list[tuple[str, int, int, int]]) -> bool:
        for name, lo, hi, mult in box:
            v = dims.get(name)
            if v is None or v < lo or v > hi or v % mult:
                return False
        return True

    def accepts(p: Prepared) -> bool:
        first = p.tensors[0]
        if first.dtype not in dtypes:
            return False
        for t in p.tensors:
            if t.device.type != device_type:
                return False
            if contiguous and not t.is_contiguous():
                return False
            if t.data_ptr() % align:
                return False
        dims = p.dims
        if not inside(dims, ranges):
            return False
        return not boxes or any(inside(dims, box) for box in boxes)

    return accepts


def dim_ranges(**kw: tuple[int, int | None, int]) -> dict[str, DimRange]:
    return {k: DimRange(min=lo, max=hi, multiple_of=m) for k, (lo, hi, m) in kw.items()}
