"""The fused MoE GEMM: SGLang's Triton ``fused_moe_kernel`` through ``invoke_fused_moe_kernel``, bf16/fp16 weights.

Every (token, slot) pair of a routed batch multiplies its token's hidden row by its expert's weight matrix; the
kernel runs one expert per BLOCK_SIZE_M block of ``sorted_token_ids`` (moe_align's output). This folder pins the
up-projection call SGLang's Triton MoE runner makes for unquantized weights (``fused_experts_impl``: w1, no
bias, no router weight on the input, c_sorted / TMA off as the shipped configs leave them, every expert local),
with the config SGLang picks on an H200 for that model, split and batch (its tuned JSON, nearest M).

The wrapper takes a config dict and a Triton compute dtype, which no call list can hold: the op folder's
``adapter.py`` (ours) builds both from the contract's scalars and the tensors' dtype.
"""

from __future__ import annotations

import torch
import triton.language as tl

from astra_sglang.contract.op import CallSite, Dim, ScalarArg, ShapeCase, Signature, TensorArg
from astra_sglang.extract.catalog._moe_configs import moe_config
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import case, dedup

_MODULE = "sglang.kernels.ops.moe.fused_moe_triton_kernels"
_RUNNER = "sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe"

# P: sorted_token_ids as SGLang's moe_align sizes it for the Triton runner: T*TK + E*(BM-1)
_P = "T*TK+E*(BM-1)"

# (source, local experts, top_k, hidden K, w1 rows N = 2 * intermediate / TP); the tuned config file is keyed
# on N/2 (w2's inner dim)
_SPLITS = (
    ("Mixtral-8x7B TP8", 8, 2, 4096, 3584),
    ("Mixtral-8x7B TP4", 8, 2, 4096, 7168),
    ("Qwen3-30B-A3B TP2", 128, 8, 2048, 768),
    ("Qwen3-30B-A3B TP1", 128, 8, 2048, 1536),
)
_TOKENS = {"Mixtral-8x7B TP8": (1, 64, 2048), "Mixtral-8x7B TP4": (8, 512), "Qwen3-30B-A3B TP2": (1, 64, 2048),
           "Qwen3-30B-A3B TP1": (8, 512)}


def _config_dims(e: int, n: int, t: int) -> dict[str, int]:
    c = moe_config(e, n // 2, t, None, None)
    return {"BM": c["BLOCK_SIZE_M"], "BN": c["BLOCK_SIZE_N"], "BK": c["BLOCK_SIZE_K"], "GM": c["GROUP_SIZE_M"],
            "NW": c.get("num_warps", 4), "NS": c.get("num_stages", 3)}


def _shapes() -> list[ShapeCase]:
    cases: list[ShapeCase] = []
    for src, e, tk, k, n in _SPLITS:
        for t in _TOKENS[src]:
            tag = "decode" if t <= 64 else "prefill"
            dims = {"T": t, "TK": tk, "E": e, "N": n, "K": k, **_config_dims(e, n, t)}
            cases.append(case([tag], f"{src} {tag} T={t}, w1 up-projection (H200 config BLOCK_M={dims['BM']})",
                              **dims))
    e, tk, k, n = 128, 8, 2048, 768
    cases.append(case(["edge"], "edge: Qwen3-30B-A3B TP2, 3 tokens (24 pairs over 128 experts: most experts idle)",
                      T=3, TK=tk, E=e, N=n, K=k, **_config_dims(e, n, 3)))
    return dedup(cases)


_COMPUTE = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}


def reference(**args):
    a, b, ids = args["A"].float(), args["B"], args["topk_ids"].long()
    t, tk = ids.shape
    out = torch.zeros(t * tk, b.shape[1], dtype=torch.float32, device=a.device)
    scale = torch.zeros_like(out)
    rows = torch.arange(t * tk, device=a.device)
    flat = ids.reshape(-1)
    for e in torch.unique(flat).tolist():
        pick = rows[flat == e]
        w = b[e].float()
        x = a[pick // tk]
        out[pick] = x @ w.T
        scale[pick] = x.abs() @ w.abs().T
    return {"C": out.reshape(t, tk, -1), "C:scale": scale.reshape(t, tk, -1)}


def make_inputs(dims, dtype, gen, device):
    t, tk, e, bm = dims["T"], dims["TK"], dims["E"], dims["BM"]
    bias = 2.0 * torch.randn(1, e, generator=gen, device=device)
    logits = torch.randn(t, e, generator=gen, device=device) + bias
    weights, ids = torch.topk(torch.softmax(logits, dim=-1), min(tk, e), dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    flat = ids.reshape(-1)
    numel = flat.numel()
    cap = numel + e * (bm - 1)
    counts = torch.bincount(flat, minlength=e)
    padded = (counts + bm - 1) // bm * bm
    start = torch.cumsum(padded, 0) - padded
    order = torch.argsort(flat, stable=True)
    rank = torch.arange(numel, device=device) - (torch.cumsum(counts, 0) - counts)[flat[order]]
    sorted_ids = torch.full((cap,), numel, dtype=torch.int32, device=device)
    sorted_ids[start[flat[order]] + rank] = order.to(torch.int32)
    total = int(padded.sum())
    expert_ids = torch.full(((cap + bm - 1) // bm,), -1, dtype=torch.int32, device=device)
    expert_ids[: total // bm] = torch.repeat_interleave(torch.arange(e, device=device), padded // bm).to(torch.int32)
    return {"topk_weights": weights.float().contiguous(), "topk_ids": ids.to(torch.int32).contiguous(),
            "sorted_token_ids": sorted_ids, "expert_ids": expert_ids,
            "num_tokens_post_padded": torch.tensor([total], dtype=torch.int32, device=device)}


def scalars(dims, dtype):
    return {"BLOCK_SIZE_M": dims["BM"], "BLOCK_SIZE_N": dims["BN"], "BLOCK_SIZE_K": dims["BK"],
            "GROUP_SIZE_M": dims["GM"], "num_warps": dims["NW"], "num_stages": dims["NS"]}


def call(invoke, A, B, C, topk_weights, topk_ids, sorted_token_ids, expert_ids, num_tokens_post_padded,
         BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, num_warps, num_stages):
    config = {"BLOCK_SIZE_M": BLOCK_SIZE_M, "BLOCK_SIZE_N": BLOCK_SIZE_N, "BLOCK_SIZE_K": BLOCK_SIZE_K,
              "GROUP_SIZE_M": GROUP_SIZE_M, "num_warps": num_warps, "num_stages": num_stages}
    invoke(A, B, None, C, None, None, None, topk_weights, topk_ids, sorted_token_ids, expert_ids,
           num_tokens_post_padded, False, topk_ids.shape[1], config, compute_type=_COMPUTE[A.dtype],
           use_fp8_w8a8=False, use_int8_w8a8=False, use_int8_w8a16=False, use_int4_w4a16=False,
           per_channel_quant=False, block_shape=None, c_sorted=False, b_use_tma=False, filter_expert=False)


REFERENCE = FileText(
    doc=(
        "Reference for fused_moe_kernel (astra-sglang, written; unquantized up-projection, no router weight):\n"
        "C[t, s, :] = A[t] @ B[topk_ids[t, s]].T in float32, one expert at a time. 'C:scale' is |A| @ |B_e|^T, the size\n"
        "of the terms each output sums: the checker's relative bound uses it where the dot product cancels."
    ),
    imports=("import torch",),
    functions=(reference,),
)

INPUTS = FileText(
    doc=(
        "Inputs for fused_moe_kernel (astra-sglang, written): a reference routing, then moe_align.\n"
        "\n"
        "Router logits are normal with a per-expert bias (hot experts and idle ones, as in real batches); each token\n"
        "takes the top-TK experts of softmax(logits) with renormalized weights (float32). sorted_token_ids /\n"
        "expert_ids / num_tokens_post_padded are what moe_align_block_size gives for BLOCK_SIZE_M = BM: per expert, its\n"
        "flat (token, slot) indices ascending, padded with the sentinel T*TK to a multiple of BM; expert_ids[j] is the\n"
        "expert of block j (-1 past the last block, which the kernel never reads).\n"
    ),
    imports=("import torch",),
    functions=(make_inputs, scalars),
)

ADAPTER = FileText(
    doc=(
        "How SGLang's Triton MoE runner calls invoke_fused_moe_kernel for unquantized w1 (astra-sglang, written):\n"
        "the config dict SGLang picked for this shape and the Triton compute dtype of the activations, which a call\n"
        "list cannot hold (fused_experts_impl: no bias or scales, apply_router_weight_on_input=False, top_k = TK,\n"
        "c_sorted / b_use_tma False, filter_expert False: every expert is local)."
    ),
    imports=("import torch", "import triton.language as tl"),
    constants=("_COMPUTE",),
    functions=(call,),
)


ENTRY = CatalogEntry(
    short_name="fused_moe_kernel",
    op_id="moe.fused_moe_kernel",
    entry_point=f"{_MODULE}:invoke_fused_moe_kernel",
    kind="triton",
    signature=Signature(
        dims=[
            Dim(name="T", meaning="tokens in the batch"),
            Dim(name="TK", meaning="experts per token (top_k)"),
            Dim(name="E", meaning="experts on this rank (all local)"),
            Dim(name="N", meaning="w1 rows per expert = 2 * moe_intermediate / TP (gate and up)", multiple_of=2),
            Dim(name="K", meaning="hidden size", multiple_of=8),
            Dim(name="BM", meaning="config BLOCK_SIZE_M (also moe_align's block size)", min=16, multiple_of=16,
                max=256),
            Dim(name="BN", meaning="config BLOCK_SIZE_N", min=16, multiple_of=16, max=256),
            Dim(name="BK", meaning="config BLOCK_SIZE_K", min=16, multiple_of=16, max=256),
            Dim(name="GM", meaning="config GROUP_SIZE_M", max=64),
            Dim(name="NW", meaning="config num_warps", min=4, multiple_of=4, max=8),
            Dim(name="NS", meaning="config num_stages", min=2, max=5),
        ],
        tensors=[
            TensorArg(name="A", role="input", shape=["T", "K"], dtype="{dtype}"),
            TensorArg(name="B", role="input", shape=["E", "N", "K"], dtype="{dtype}"),
            TensorArg(name="C", role="output", shape=["T", "TK", "N"], dtype="{dtype}"),
            TensorArg(name="topk_weights", role="input", shape=["T", "TK"], dtype="float32", align_bytes=4,
                      generated=True),
            TensorArg(name="topk_ids", role="input", shape=["T", "TK"], dtype="int32", align_bytes=4, generated=True),
            TensorArg(name="sorted_token_ids", role="input", shape=[_P], dtype="int32", align_bytes=4,
                      generated=True),
            TensorArg(name="expert_ids", role="input", shape=[f"({_P}+BM-1)//BM"], dtype="int32", align_bytes=4,
                      generated=True),
            TensorArg(name="num_tokens_post_padded", role="input", shape=["1"], dtype="int32", align_bytes=4,
                      generated=True),
        ],
        scalars=[
            ScalarArg(name="BLOCK_SIZE_M", type="int", default=64, meaning="= BM"),
            ScalarArg(name="BLOCK_SIZE_N", type="int", default=64, meaning="= BN"),
            ScalarArg(name="BLOCK_SIZE_K", type="int", default=32, meaning="= BK"),
            ScalarArg(name="GROUP_SIZE_M", type="int", default=8, meaning="= GM"),
            ScalarArg(name="num_warps", type="int", default=4, meaning="= NW"),
            ScalarArg(name="num_stages", type="int", default=3, meaning="= NS"),
        ],
        dtypes=["bfloat16", "float16"],
        relations=[
            "C[t, s] = A[t] @ B[topk_ids[t, s]]^T (fp32 accumulation, stored in the activation dtype)",
            "sorted_token_ids / expert_ids / num_tokens_post_padded: moe_align_block_size(topk_ids, BM) (see "
            "inputs.py); every (t, s) pair appears once, padding slots hold T*TK",
            "the config (BM, BN, BK, GM, NW, NS) is SGLang's for this shape on an H200; a replacement may ignore "
            "all but BM, which shapes sorted_token_ids",
        ],
        returns=[],
    ),
    reference=REFERENCE,
    inputs=INPUTS,
    inputs_scalars=True,
    adapter=ADAPTER,
    shapes=_shapes,
    call=["A", "B", "C", "topk_weights", "topk_ids", "sorted_token_ids", "expert_ids", "num_tokens_post_padded",
          "BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages"],
    wrapper=f"{_MODULE}:invoke_fused_moe_kernel",
    callsite_modules=(_MODULE,),
    serving_sites={f"{_MODULE}:invoke_fused_moe_kernel": "the definition"},
    extra_sites=[
        CallSite(
            module=_RUNNER, attr="invoke_fused_moe_kernel", binds="caller", target=None, same_function=True,
            reached_by_serving=True,
            note="read from source: fused_experts_impl (the Triton MoE runner, the default MoE backend for "
            "unquantized Mixtral / Qwen-MoE on CUDA) calls it twice per layer: w1 (this contract: "
            "apply_router_weight_on_input False, top_k = TK) and w2 (mul_routed_weight True, top_k 1, not "
            "covered here)",
        ),
    ],
    notes=[
        "pinned call: unquantized bf16/fp16 up-projection; fp8/int8/int4 and the w2 down-projection "
        "(mul_routed_weight, top_k=1) are other contracts",
        "config per case = try_get_optimal_moe_config on an H200 (tuned JSON of this Triton version, else the "
        "newest; the nearest M); held-out shapes draw the config dims from the values the cases use",
    ],
)

