"""decode_attention (SGLang's Triton split-KV decode attention, ``decode_attention_fwd``), o written in place.

Call site: ``sglang.kernels.ops.attention.decode_attention.decode_attention_fwd``. ``TritonAttnBackend.__init__``
imports that name lazily and keeps ``torch.compiler.disable(decode_attention_fwd)``, so a REPLACE of the module
attribute at plugin load (before any backend is built) is what every Triton decode batch then calls:
``forward_decode``'s main call (one per layer and decode step, eager and under CUDA-graph capture) and its DCP
call (float32 ``o``, ``attn_lse`` read afterwards: not served, below).

Served: the op contract's function only, i.e. bf16/fp16 q, KV and o of one dtype, 3-D KV buffers (token slots;
for a 3-D buffer ``page_size`` changes no address: SGLang's page stride is ``slot_stride * page_size``), equal
qk and v head dims, no logit cap, sinks, xAI temperature, MLA, score_mod or scales. ``enable_lean`` is refused
only where the original would take the Lean path (ROCm): on CUDA SGLang ignores it, and its capture-time policy
sets it for every captured batch of 16 and more (LLaMA-3-8B), so refusing it there would serve no batch that
counts. ``use_pdl`` and ``uneven_batch`` (a HIP scheduling hint) change no result and are not passed on.

The guard sees B, NK, G, D, MS and P, never S, R or X: the mean KV length is ``kv_indptr[B] / B``, a device read
(a synchronisation, illegal under CUDA-graph capture), ``kv_indices`` is the whole pre-sized buffer under graphs,
so its length says nothing, and the length mix (R) and the pool's spare slots (X) follow from S. Workspace
SGLang sizes for the largest captured batch (``attn_logits``, ``attn_lse``, ``kv_indptr``, ``num_kv_splits``) is
passed as views of its first B rows, the contract's shapes. A row-strided q (LLaMA's, a view of the fused qkv
output, row stride (NQ + 2 NK) * D) reaches the kernel as it is, dim QS = 1, where the op contract checks that
layout (its dim QS): every candidate and patch was checked on it. Under a contract without QS, or with another
row stride, q reaches the kernel as a contiguous copy (2.8 us a layer at batch 128 on the H100, 2026-12-06).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from astra_sglang.contract.patch import GuardSpec
from astra_sglang.patches.adapters.base import Args, OpAdapter, Prepared, dim_ranges

_NAMES = ("q", "k_buffer", "v_buffer", "o", "kv_indptr", "kv_indices", "attn_logits", "attn_lse", "num_kv_splits")
_SCALARS = ("max_kv_splits", "sm_scale", "page_size")


def _is_number(x: Any, value: float) -> bool:
    """``x == value`` for a Python number; False for anything else (a tensor scale would need a device read)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == value


class DecodeAttentionAdapter(OpAdapter):
    op = "decode_attention"
    tensor_names = _NAMES
    scalar_names = _SCALARS
    unseen_sizes = ("S",)  # the KV lengths are on the GPU; reading them would synchronise (and break capture)
    backends = ("triton",)  # TritonAttnBackend's decode; SGLang 0.5.23 defaults to fa3 on an H100/H200 (MHA)

    def __init__(self) -> None:
        import torch

        self._hip = torch.version.hip is not None  # SGLang's is_hip(): where enable_lean selects the Lean kernel
        self._half = (torch.bfloat16, torch.float16)
        self._f32, self._i32, self._i64 = torch.float32, torch.int32, torch.int64
        self._inputs: Any = None
        self._span_limit: int | None = None  # KV buffer elements the contract's calls reach; read once
        self._span_said = False
        self._qkv_rows: bool | None = None  # the contract checks q as a view of the qkv rows (dim QS); read once

    def prepare(self, q: Any, k_buffer: Any, v_buffer: Any, o: Any, kv_indptr: Any, kv_indices: Any,
                attn_logits: Any, attn_lse: Any, num_kv_splits: Any, max_kv_splits: Any, sm_scale: Any,
                k_scale: Any, v_scale: Any, logit_cap: Any = 0.0, sinks: Any = None, xai_temperature_len: Any = -1,
                has_mla: Any = False, use_pdl: Any = False, page_size: Any = 1, score_mod: Any = None,
                aux_tensors: Any = None, enable_lean: Any = None, lean_Mp: Any = None, lean_Lp: Any = None,
                lean_Op: Any = None, lean_locks: Any = None, uneven_batch: Any = None) -> Prepared | None:
        """SGLang's full call (exactly ``decode_attention_fwd``'s signature) -> the contract's args, or None."""
        if (not _is_number(logit_cap, 0) or sinks is not None or not isinstance(xai_temperature_len, int)
                or xai_temperature_len > 0 or has_mla or score_mod is not None or aux_tensors is not None
                or (self._hip and enable_lean) or not _is_number(k_scale, 1.0) or not _is_number(v_scale, 1.0)
                or not isinstance(max_kv_splits, int) or not isinstance(page_size, int) or page_size < 1
                or not isinstance(sm_scale, (int, float))):
            return None
        dt = q.dtype
        if (dt not in self._half or k_buffer.dtype != dt or v_buffer.dtype != dt or o.dtype != dt
                or attn_logits.dtype != self._f32 or attn_lse.dtype != self._f32 or kv_indptr.dtype != self._i32
                or num_kv_splits.dtype != self._i32 or kv_indices.dtype != self._i64):
            return None
        if (q.dim() != 3 or k_buffer.dim() != 3 or v_buffer.dim() != 3 or o.shape != q.shape
                or attn_logits.dim() != 4 or attn_lse.dim() != 3 or kv_indptr.dim() != 1
                or kv_indices.dim() != 1 or num_kv_splits.dim() != 1):
            return None
        b, nq, d = q.shape
        slots, nk, dk = k_buffer.shape
        if (v_buffer.shape != k_buffer.shape or dk != d or nk < 1 or nq % nk
                or attn_logits.shape[1:] != (nq, max_kv_splits, d) or attn_logits.shape[0] < b
                or attn_lse.shape[1:] != (nq, max_kv_splits) or attn_lse.shape[0] < b
                or kv_indptr.shape[0] < b + 1 or num_kv_splits.shape[0] < b):
            return None
        # numel is the buffers' span: the guard serves contiguous KV buffers only (a strided one goes to SGLang)
        if max(k_buffer.numel(), v_buffer.numel()) > self._checked_span():
            self._say_span_once(max(k_buffer.numel(), v_buffer.numel()))
            return None  # element offsets no contract shape reached (past 2^31 an int32 offset wraps)
        # views of the first B rows (host metadata only): the contract's shapes, no device memory
        if attn_logits.shape[0] != b:
            attn_logits = attn_logits[:b]
        if attn_lse.shape[0] != b:
            attn_lse = attn_lse[:b]
        if kv_indptr.shape[0] != b + 1:
            kv_indptr = kv_indptr[:b + 1]
        if num_kv_splits.shape[0] != b:
            num_kv_splits = num_kv_splits[:b]
        tensors = (q, k_buffer, v_buffer, o, kv_indptr, kv_indices, attn_logits, attn_lse, num_kv_splits)
        args = dict(zip(_NAMES, tensors))
        args.update(max_kv_splits=max_kv_splits, sm_scale=float(sm_scale), page_size=page_size)
        dims = {"B": b, "NK": nk, "G": nq // nk, "D": d, "MS": max_kv_splits, "P": page_size, "QS": 0}
        if q.is_contiguous():
            return Prepared(args, tensors, dims)
        # LLaMA's q on CUDA: a view of the fused qkv projection, rows of (q_size + 2 * kv_size). Only a view whose
        # heads are whole rows is taken; the guard then checks the other tensors' layout, and q's here.
        if q.stride(2) != 1 or q.stride(1) != d:
            return None
        if q.stride(0) == (nq + 2 * nk) * d and q.data_ptr() % 16 == 0 and self._checks_qkv_rows():
            dims["QS"] = 1  # the layout the contract checked: the kernel gets q as it is
        return Prepared(args, tensors[1:], dims)  # QS 0: launch hands the kernel a contiguous copy

    def served_forms(self, dims: dict[str, int]) -> list[dict[str, int]]:
        """Check shapes were written in the eager form (q contiguous, QS 0; kv_indices exactly the batch's rows,
        KX 0). A LLaMA-family server under CUDA graphs calls in the other: q a view of the qkv rows (QS 1, handed
        to the kernel as it is wherever the contract checks that layout) and kv_indices the whole pre-sized graph
        buffer, stale slots past the rows (KX > 0; here B*S more). Both forms are checked; the second sets both
        dims, so a kernel wrong in either alone fails it, at twice the check's cost rather than four times."""
        served = dict(dims)
        if "QS" in dims and self._checks_qkv_rows():
            served["QS"] = 1
        if dims.get("KX") == 0 and "S" in dims and "B" in dims:  # the contract has KX (complete_dims put it there)
            served["KX"] = dims["B"] * dims["S"]
        return [dims] if served == dims else [dims, served]

    def _checked_span(self) -> int:
        """The largest KV buffer (elements) a served call may have: 2^31 - 1, or
        the contract's largest pool where a shape reaches past it. Why: a kernel that computes KV offsets in
        int32 (kv_indices are int64; a candidate may narrow them to save registers) is right at every contract
        shape, whose pools hold at most ~2^28 elements, and wraps on a server whose per-layer buffer passes 2^31
        elements: bf16 K and V of L attention layers at that size need L x 8.6 GB, within an H200's pool for a
        model of up to ~15 attention layers (hybrid models keep few: the rest are linear or sliding). Such a call
        is SGLang's."""
        if self._span_limit is None:
            import math

            pools = [0]
            try:  # the KV buffers' sizes as the contract's signature declares them, at each of its shapes
                from astra_sglang.contract.op import load_manifest
                from astra_sglang.harness.shared.suite import shape_of
                from astra_sglang.patches.registry import op_folder

                op = load_manifest(op_folder(self.op))
                kv = [t.shape for t in op.signature.tensors if t.name in ("k_buffer", "v_buffer")]
                pools += [math.prod(shape_of(shape, case.dims)) for case in op.shapes for shape in kv]
            except Exception:  # noqa: BLE001 - unreadable here: the bound every contract revision stays under
                pass
            self._span_limit = max((1 << 31) - 1, *pools)
        return self._span_limit

    def _say_span_once(self, elements: int) -> None:
        """One log line per patch and process: such a server's decode calls all go to SGLang, and its counters
        alone would not say why."""
        if not self._span_said:
            self._span_said = True
            import logging

            logging.getLogger("astra_sglang.patches").warning(
                "astra-sglang: decode_attention calls with a KV buffer of %d elements (past %d, where an int32 "
                "element offset wraps; no contract shape checked a pool that large) go to SGLang's kernel", elements,
                self._checked_span())

    def _checks_qkv_rows(self) -> bool:
        """Whether the op contract (the one the live patch pins) checks q as a view of the qkv rows."""
        if self._qkv_rows is None:
            from astra_sglang.contract.op import load_manifest
            from astra_sglang.patches.registry import op_folder

            try:
                dims = {d.name: d for d in load_manifest(op_folder(self.op)).signature.dims}
            except Exception:  # noqa: BLE001 - unreadable here: the copy, which every contract revision checked
                dims = {}
            self._qkv_rows = "QS" in dims and (dims["QS"].max or 0) >= 1
        return self._qkv_rows

    def launch(self, kernel: Callable[[Args], Any], p: Prepared) -> Any:
        q = p.args["q"]
        if not q.is_contiguous() and p.dims.get("QS") != 1:
            p.args["q"] = q.contiguous()
        kernel(p.args)
        return None  # the original returns nothing: o is written in place

    def sample(self, dims: dict[str, int], dtype: Any, device: Any, seed: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """A decode batch from the contract's own input generator (mixed lengths, scattered slots, SGLang's
        split counts), plus what it leaves to the harness: v_buffer, a poisoned o and the workspace."""
        import torch

        from astra_sglang.checker import fill_poison

        make, scalars = self._contract_inputs()
        name = str(dtype).removeprefix("torch.")
        g = torch.Generator(device=device).manual_seed(seed)
        a = make(dims, name, g, str(device))
        b, nq, d, ms = dims["B"], dims["NK"] * dims["G"], dims["D"], dims["MS"]
        q = a["q"]
        if dims.get("QS") == 1:  # q as LLaMA passes it: the first NQ heads of each fused qkv row
            qkv = torch.randn((b, nq + 2 * dims["NK"], d), generator=g, device=device).to(dtype)
            qkv[:, :nq].copy_(q)
            q = qkv[:, :nq]
        k = a["k_buffer"]
        v = torch.randn(k.shape, generator=g, device=device).to(dtype)
        o = torch.empty((b, nq, d), dtype=dtype, device=device)
        fill_poison(o)  # an element the kernel never writes keeps the checker's poison
        logits = torch.empty((b, nq, ms, d), dtype=torch.float32, device=device)
        lse = torch.empty((b, nq, ms), dtype=torch.float32, device=device)
        s = scalars(dims, name) if scalars is not None else {}
        sm_scale = float(s.get("sm_scale", d ** -0.5))
        return ((q, k, v, o, a["kv_indptr"], a["kv_indices"], logits, lse, a["num_kv_splits"], ms, sm_scale,
                 1.0, 1.0), {"page_size": dims.get("P", 1)})

    def _contract_inputs(self) -> tuple[Any, Any]:
        """The op folder's ``make_inputs``/``scalars`` (loaded once)."""
        if self._inputs is None:
            from astra_sglang.contract.op import load_manifest
            from astra_sglang.loader.launch import load_inputs
            from astra_sglang.patches.registry import op_folder

            folder = op_folder(self.op)
            make, scalars = load_inputs(folder, load_manifest(folder))
            if make is None:
                raise ValueError(f"{folder} has no input generator; decode_attention's sample needs its batches")
            self._inputs = (make, scalars)
        return self._inputs  # type: ignore[no-any-return]

    def outputs(self, args: tuple[Any, ...], kwargs: dict[str, Any], ret: Any) -> dict[str, Any]:
        return {"o": args[3]}  # attn_logits/attn_lse are workspace: the contract never compares them

    def resized(self, dims: dict[str, int], name: str, value: int) -> dict[str, int]:
        """At another mean KV length S the same server keeps its CUDA-graph kv_indices buffer (B*S + KX entries,
        KX > 0: the graph form), so KX takes up what the batch's rows give back."""
        out = {**dims, name: value}
        if name == "S" and dims.get("KX", 0) > 0:
            out["KX"] = max(1, dims["B"] * (dims["S"] - value) + dims["KX"])
        return out

    def default_guard(self) -> GuardSpec:
        return GuardSpec(dtypes=["bfloat16", "float16"],
                         dims=dim_ranges(B=(1, 4096, 1), NK=(1, 128, 1), G=(1, 16, 1), D=(64, 256, 16),
                                         MS=(8, 8, 1), P=(1, 256, 1)))

    def default_check_shapes(self) -> list[dict[str, int]]:
        return [{"B": 1, "S": 512, "NK": 8, "G": 4, "D": 128, "P": 1, "R": 1, "X": 64, "MS": 8},
                {"B": 7, "S": 300, "NK": 32, "G": 1, "D": 128, "P": 1, "R": 2, "X": 64, "MS": 8},
                {"B": 128, "S": 256, "NK": 8, "G": 4, "D": 128, "P": 16, "R": 2, "X": 64, "MS": 8}]
