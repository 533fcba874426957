"""What SGLang's two fused-MoE GEMM calls share: the routed batch, the config scalars, the expert splits and the
token counts served.

``fused_experts_impl`` (the Triton MoE runner) calls ``invoke_fused_moe_kernel`` twice per layer on one
moe_align sort: the up-projection (``fused_moe_kernel``: w1, gate and up, top_k = TK) and, after SiLU-and-mul,
the down-projection (``fused_moe_down``: w2, top_k = 1, each row scaled by its routing weight). Both take the
config SGLang picks for the layer's token count on the GPU (its tuned JSON per GPU: a case per served GPU), and the
down call's BLOCK_SIZE_M is the up call's (one sort serves both).
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import Dim, ScalarArg, ShapeCase, TensorArg, served_on_tag
from astra_sglang.extract.catalog._moe_configs import PRIMARY_GPU, SERVED_GPUS, moe_config, moe_down_config
from astra_sglang.extract.shapes import case, dedup

# P: sorted_token_ids as SGLang's moe_align sizes it for the Triton runner: T*TK + E*(BM-1)
P = "T*TK+E*(BM-1)"

# (source, local experts, top_k, hidden, moe intermediate per rank = intermediate / TP); the tuned config file
# is keyed on the intermediate (w2's inner dim)
SPLITS = (
    ("Mixtral-8x7B TP8", 8, 2, 4096, 1792),
    ("Mixtral-8x7B TP4", 8, 2, 4096, 3584),
    ("Qwen3-30B-A3B TP2", 128, 8, 2048, 384),
    ("Qwen3-30B-A3B TP1", 128, 8, 2048, 768),
)
# tokens per layer call: decode batches (M = T*TK pairs from 1 to 2048) and one prefill chunk per model; 32 and 128
# are issue 25's end-to-end batches
DECODE_T = (1, 16, 32, 64, 128, 256)
# The timed set ("paper", what `optimize` and `tune` time by default): the decode of the model the end-to-end proof
# runs, Qwen3-30B-A3B on one H200 (61 GB of bf16 weights), as its forward serves it. A loop timed on all four splits
# swept 96 configs over 20 shapes per GPU (4 BLOCK_SIZE_M values, each config compiled for each): more than one
# device call, on shapes no e2e measures; the other splits stay in the suite and the held-out draws.
TIMED_SPLIT = "Qwen3-30B-A3B TP1"
PREFILL_T = {"Mixtral-8x7B TP4": 2048, "Qwen3-30B-A3B TP1": 2048}
EDGE = ("Qwen3-30B-A3B TP2", 3)  # 24 pairs over 128 experts: most experts idle


def config_dims(e: int, inner: int, t: int, down: bool, gpu: str = PRIMARY_GPU) -> dict[str, int]:
    """The config's values as the contract's dims: SGLang's up config on ``gpu`` for T tokens, or its down config."""
    c = moe_down_config(e, inner, t, None, None, gpu) if down else moe_config(e, inner, t, None, None, gpu)
    return {"BM": c["BLOCK_SIZE_M"], "BN": c["BLOCK_SIZE_N"], "BK": c["BLOCK_SIZE_K"], "GM": c["GROUP_SIZE_M"],
            "NW": c.get("num_warps", 4), "NS": c.get("num_stages", 3)}


def served_shapes(widths: str, what: str) -> list[ShapeCase]:
    """Every split at every served token count, once per GPU of ``SERVED_GPUS`` with the config SGLang tunes for it
    (tagged ``served-on:<GPU>``; a case whose config two GPUs share carries both tags): an H100 serves other
    tiles than an H200, and a candidate is timed against what serves on the GPU it runs on (suite.timed_shapes).
    ``widths`` names the GEMM's dims: 'up' gives N (= 2 x the intermediate, gate and up) and K (hidden), 'down'
    gives H (hidden, the output) and I (the intermediate)."""
    down = widths == "down"
    cases: list[ShapeCase] = []

    def add(tags: list[str], src: str, e: int, tk: int, hidden: int, inner: int, t: int, label: str, gpu: str) -> None:
        gemm = {"H": hidden, "I": inner} if down else {"N": 2 * inner, "K": hidden}
        dims = {"T": t, "TK": tk, "E": e, **gemm, **config_dims(e, inner, t, down, gpu)}
        cases.append(case([*tags, served_on_tag(gpu)], f"{label}, {what} ({gpu} config BLOCK_M={dims['BM']})",
                          **dims))

    for gpu in SERVED_GPUS:
        for src, e, tk, hidden, inner in SPLITS:
            for t in (*DECODE_T, *([PREFILL_T[src]] if src in PREFILL_T else [])):
                tag = "decode" if t <= 256 else "prefill"
                tags = ["paper", tag] if tag == "decode" and src == TIMED_SPLIT else [tag]
                add(tags, src, e, tk, hidden, inner, t, f"{src} {tag} T={t}", gpu)
        src, t = EDGE
        _, e, tk, hidden, inner = next(s for s in SPLITS if s[0] == src)
        add(["edge"], src, e, tk, hidden, inner, t, f"edge: {src}, {t} tokens ({t * tk} pairs over {e} experts: most "
            "experts idle)", gpu)
    return dedup(cases)


ROUTING_DIMS = [
    Dim(name="T", meaning="tokens in the batch"),
    Dim(name="TK", meaning="experts per token (top_k)"),
    Dim(name="E", meaning="experts on this rank (all local)"),
]
CONFIG_DIMS = [
    Dim(name="BM", meaning="config BLOCK_SIZE_M (also moe_align's block size)", min=16, multiple_of=16, max=256),
    Dim(name="BN", meaning="config BLOCK_SIZE_N", min=16, multiple_of=16, max=256),
    Dim(name="BK", meaning="config BLOCK_SIZE_K", min=16, multiple_of=16, max=256),
    Dim(name="GM", meaning="config GROUP_SIZE_M", max=64),
    Dim(name="NW", meaning="config num_warps", min=4, multiple_of=4, max=8),
    Dim(name="NS", meaning="config num_stages", min=2, max=5),
]
ROUTING_TENSORS = [
    TensorArg(name="topk_weights", role="input", shape=["T", "TK"], dtype="float32", align_bytes=4, generated=True),
    TensorArg(name="topk_ids", role="input", shape=["T", "TK"], dtype="int32", align_bytes=4, generated=True),
    TensorArg(name="sorted_token_ids", role="input", shape=[P], dtype="int32", align_bytes=4, generated=True),
    TensorArg(name="expert_ids", role="input", shape=[f"({P}+BM-1)//BM"], dtype="int32", align_bytes=4,
              generated=True),
    TensorArg(name="num_tokens_post_padded", role="input", shape=["1"], dtype="int32", align_bytes=4,
              generated=True),
]
CONFIG_SCALARS = [
    ScalarArg(name="BLOCK_SIZE_M", type="int", default=64, meaning="= BM"),
    ScalarArg(name="BLOCK_SIZE_N", type="int", default=64, meaning="= BN"),
    ScalarArg(name="BLOCK_SIZE_K", type="int", default=32, meaning="= BK"),
    ScalarArg(name="GROUP_SIZE_M", type="int", default=8, meaning="= GM"),
    ScalarArg(name="num_warps", type="int", default=4, meaning="= NW"),
    ScalarArg(name="num_stages", type="int", default=3, meaning="= NS"),
]
CALL_TAIL = ["topk_weights", "topk_ids", "sorted_token_ids", "expert_ids", "num_tokens_post_padded",
             "BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages"]
ROUTING_RELATION = ("sorted_token_ids / expert_ids / num_tokens_post_padded: moe_align_block_size(topk_ids, BM) "
                    "(see inputs.py); every (t, s) pair appears once, padding slots hold T*TK")
CONFIG_RELATION = ("the config (BM, BN, BK, GM, NW, NS) is SGLang's for this shape on the GPU(s) its served-on tag "
                   "names (an H200's and an H100's differ); a replacement may ignore all but BM, which shapes "
                   "sorted_token_ids")

# What `tune` sweeps per shape: SGLang's own fused-MoE tuning space (benchmark/kernels/fused_moe_triton,
# get_configs_compute_bound: BLOCK_SIZE_M 16..256, N 32..256, K 64..256, GROUP_SIZE_M 1/16/32/64, warps 4/8, stages
# 2..5) at the case's BLOCK_SIZE_M, which shapes the routed inputs (the sort is padded to it), and its GROUP_SIZE_M,
# which only orders the M blocks of an expert (one or two at decode): 96 configs instead of 1920.
CONFIG_SPACE = {"BLOCK_SIZE_N": [32, 64, 128, 256], "BLOCK_SIZE_K": [64, 128, 256], "num_warps": [4, 8],
                "num_stages": [2, 3, 4, 5]}


# Spread of the per-expert router bias. A trained router spreads a batch over most experts (load balancing), and
# SGLang's forward with dummy weights touched 111 of 128 at batch 32 (profile, H200, 2026-12-03). At 2.0 a batch of
# 256 tokens touched 44 of 128 experts (seeds 0-4): every timed case read 3x fewer weights than serving does, and the
# sweep and the loop were tuned to that (2026-12-06). At 0.5: 8, 61, 88, 107, 119, 124 of 128 at T = 1, 16, 32,
# 64, 128, 256; a hot expert still gets several blocks, an idle one none.
ROUTER_BIAS = 0.5


def make_inputs(dims, dtype, gen, device):
    t, tk, e, bm = dims["T"], dims["TK"], dims["E"], dims["BM"]
    bias = ROUTER_BIAS * torch.randn(1, e, generator=gen, device=device)
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

