"""MoE routing bookkeeping: SGLang's JIT ``moe_align_block_size`` (``moe/moe_align_kernel.cu``).

The kernel groups the T*K (token, slot) pairs of a routed batch by expert, pads every expert's group to a
multiple of the GEMM's BLOCK_SIZE_M and says which expert each block belongs to, so the fused MoE GEMM can run
one expert per block. Ids are +1-offset buckets: bucket 0 holds expert -1 (tokens another EP rank serves).

Serving: SGLang's fused-MoE wrapper (``moe_runner/triton_utils/moe_align_block_size``) takes this JIT kernel when
``pad_expert_ids`` or ``return_inactive_prefix_count`` is asked for (GGUF MoE, fused Marlin MoE) or with the LoRA
option; its default Triton path uses sgl_kernel's AOT build of the same algorithm, and tiny decode batches with
more than 63 experts a Triton single-CTA kernel. This folder pins the GGUF variant (``pad_expert_ids=True``,
``pad_sorted_token_ids=True``), whose every output element is defined.
"""

from __future__ import annotations

import torch

from astra_sglang.contract.op import CallSite, Dim, ScalarArg, ShapeCase, Signature, TensorArg, Tolerance
from astra_sglang.extract.catalog._moe_configs import moe_config, moe_splits, served_dtype
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import DECODE_T, PREFILL_T, case, dedup

_MODULE = "sglang.kernels.ops.moe.moe_align"
_SRT_ALIGN = "sglang.srt.layers.moe.moe_runner.triton_utils.moe_align_block_size"

# P: sorted_token_ids capacity = SGLang's bound T*K + (E+1)*(BS-1), rounded up to whole int4 stores
_CAPACITY = "(T*K+(E+1)*(BS-1)+3)//4*4"


def _align_shapes() -> list[ShapeCase]:
    cases: list[ShapeCase] = []
    for i, (m, e, ep, n, src) in enumerate(moe_splits()):
        dtype, block = served_dtype(m)
        for tag, t in (("decode", DECODE_T[i % len(DECODE_T)]), ("prefill", PREFILL_T[i % len(PREFILL_T)])):
            bs = moe_config(e, n, t, dtype, block)["BLOCK_SIZE_M"]
            cases.append(case([tag], f"{src} {tag}, BLOCK_SIZE_M={bs} (H200 config)", T=t, K=m.top_k, E=e, EP=ep,
                              BS=bs))
    cases += [
        case(["edge", "decode"], "edge: one token, DeepSeek-V3 TP8 (257 buckets: the multi-block path)",
             T=1, K=8, E=256, EP=1, BS=16),
        case(["edge", "decode"], "edge: one token, Mixtral (9 buckets: the single-CTA small-batch path)",
             T=1, K=2, E=8, EP=1, BS=16),
        case(["edge"], "edge: Mixtral 511 tokens (1022 ids: the last small-batch size)", T=511, K=2, E=8, EP=1,
             BS=64),
        case(["edge"], "edge: Mixtral 512 tokens (1024 ids: the first multi-block size)", T=512, K=2, E=8, EP=1,
             BS=64),
        case(["edge"], "edge: DeepSeek-V3 with the shared expert fused (257 experts, top-9)", T=256, K=9, E=257,
             EP=1, BS=64),
        case(["edge"], "edge: Qwen3 EP8, most ids belong to other ranks (-1)", T=64, K=8, E=16, EP=8, BS=16),
    ]
    return dedup(cases)


def reference(**args):
    ids = args["topk_ids"].reshape(-1).long()
    dev = ids.device
    buckets, bs = int(args["num_experts"]), int(args["block_size"])
    numel = ids.numel()
    cap, nblk = args["sorted_token_ids"].numel(), args["expert_ids"].numel()
    b = ids + 1
    counts = torch.bincount(b, minlength=buckets)
    padded = (counts + bs - 1) // bs * bs
    start = torch.cumsum(padded, 0) - padded
    total = int(padded.sum())
    order = torch.argsort(b, stable=True)
    first = torch.cumsum(counts, 0) - counts
    bo = b[order]
    rank = torch.arange(numel, device=dev) - first[bo]
    sorted_ids = torch.full((cap,), numel, dtype=torch.int32, device=dev)
    sorted_ids[start[bo] + rank] = order.to(torch.int32)
    expert_ids = torch.full((nblk,), -1, dtype=torch.int32, device=dev)
    owners = torch.arange(buckets, device=dev)
    expert_ids[: total // bs] = torch.repeat_interleave(owners - 1, padded // bs).to(torch.int32)
    segments = torch.full((cap,), buckets, dtype=torch.int64, device=dev)
    segments[:total] = torch.repeat_interleave(owners, padded)
    scratch = args["cumsum_buffer"]
    return {"sorted_token_ids": sorted_ids, "expert_ids": expert_ids,
            "num_tokens_post_pad": torch.tensor([total], dtype=torch.int32, device=dev),
            "cumsum_buffer": torch.zeros_like(scratch),
            "sorted_token_ids:segments": segments,
            "cumsum_buffer:segments": torch.full(scratch.shape, -1, dtype=torch.int64, device=dev)}


def make_inputs(dims, dtype, gen, device):
    t, k, e, ep = dims["T"], dims["K"], dims["E"], dims["EP"]
    g = e * ep
    bias = 2.0 * torch.randn(1, g, generator=gen, device=device)
    logits = torch.randn(t, g, generator=gen, device=device) + bias
    picked = min(k, g)
    ids = torch.topk(torch.softmax(logits, dim=-1), picked, dim=-1).indices
    rank = int(torch.randint(0, ep, (1,), generator=gen, device=device).item())
    local = ids - rank * e
    local = torch.where((local >= 0) & (local < e), local, torch.full_like(local, -1))
    if picked < k:
        local = torch.cat([local, torch.full((t, k - picked), -1, dtype=local.dtype, device=device)], dim=1)
    return {"topk_ids": local.to(getattr(torch, dtype)).contiguous()}


def scalars(dims, dtype):
    return {"num_experts": dims["E"] + 1, "block_size": dims["BS"]}


REFERENCE = FileText(
    doc=(
        "Reference for moe_align_block_size (astra-sglang, written; the GGUF variant: pad_expert_ids, padded ids).\n"
        "\n"
        "Bucket b = id + 1 (bucket 0 = expert -1). Each bucket's (token, slot) indices i (into topk_ids.flatten()) fill\n"
        "a run of ceil(count_b / BS) * BS slots starting at the padded prefix sum; the rest of the run and "
        "everything past\n"
        "the total is numel. expert_ids[j] = bucket - 1 of block j, -1 past the last block. The kernel writes a bucket's\n"
        "indices with atomics, so their order within the bucket is not defined: 'sorted_token_ids:segments' gives every\n"
        "slot its bucket and the checker compares each bucket as a sorted multiset (this reference writes them\n"
        "ascending). cumsum_buffer is the kernel's scratch (the single-CTA path does not touch it): segments -1, never\n"
        "compared."
    ),
    imports=("import torch",),
    functions=(reference,),
)

INPUTS = FileText(
    doc=(
        "Inputs for moe_align_block_size (astra-sglang, written): top-k expert ids from a reference routing.\n"
        "\n"
        "Router logits are normal with a per-expert bias (some experts hot, some without a token, as in real batches);\n"
        "each token takes the top-K experts of softmax(logits) over the E*EP global experts. With expert parallelism\n"
        "this rank (drawn) keeps its E local experts and every other id becomes -1, SGLang's EP convention (bucket 0 of\n"
        "the +1 offset). Where K exceeds the global expert count (only in invented shapes) the surplus slots are -1.\n"
    ),
    imports=("import torch",),
    functions=(make_inputs, scalars),
)


ENTRY = CatalogEntry(
    short_name="moe_align_block_size",
    op_id="moe.moe_align_block_size",
    entry_point=f"{_MODULE}:moe_align_block_size",
    kind="cuda_jit",
    signature=Signature(
        dims=[
            Dim(name="T", meaning="tokens in the batch"),
            Dim(name="K", meaning="experts per token (top_k)"),
            Dim(name="E", meaning="experts on this rank (num_experts passed = E + 1 buckets)", max=8191),
            Dim(name="EP", meaning="expert-parallel size: the router picks among E*EP experts"),
            Dim(name="BS", meaning="block size = the fused MoE GEMM's BLOCK_SIZE_M", min=8, multiple_of=8,
                max=256),
        ],
        tensors=[
            TensorArg(name="topk_ids", role="input", shape=["T", "K"], dtype="{dtype}", align_bytes=4,
                      generated=True),
            TensorArg(name="sorted_token_ids", role="output", shape=[_CAPACITY], dtype="int32"),
            TensorArg(name="expert_ids", role="output", shape=[f"({_CAPACITY}+BS-1)//BS"], dtype="int32",
                      align_bytes=4),
            TensorArg(name="num_tokens_post_pad", role="output", shape=["1"], dtype="int32", align_bytes=4),
            TensorArg(name="cumsum_buffer", role="inplace", shape=["E+2"], dtype="int32", align_bytes=4),
        ],
        scalars=[
            ScalarArg(name="num_experts", type="int", default=9, meaning="buckets = local experts + 1"),
            ScalarArg(name="block_size", type="int", default=64, meaning="BLOCK_SIZE_M"),
        ],
        dtypes=["int32"],
        relations=[
            "topk_ids in [-1, E-1]; -1 = an expert of another EP rank (bucket 0)",
            "sorted_token_ids: per bucket, its flat (token, slot) indices then numel up to a multiple of BS; "
            "numel past num_tokens_post_pad; order within a bucket undefined (atomics)",
            "expert_ids[j] = expert of block j (-1 for bucket 0 and past the last block)",
            "num_tokens_post_pad[0] = sum over buckets of ceil(count / BS) * BS",
            "cumsum_buffer: scratch",
        ],
        returns=[],
    ),
    reference=REFERENCE,
    shapes=_align_shapes,
    call=["topk_ids", "num_experts", "block_size", "sorted_token_ids", "expert_ids", "num_tokens_post_pad",
          "cumsum_buffer", "True"],
    builder=f"{_MODULE}:_jit_moe_align_module",
    builder_args={"int32": ("torch.int32", False, False, True)},
    entry_export="moe_align_block_size",
    tolerances={"int32": Tolerance(atol=0.0, rtol=0.0)},
    inputs=INPUTS,
    inputs_scalars=True,
    callsite_modules=(_MODULE, "sglang.kernels.ops.lora.moe.virtual_experts"),
    serving_sites={
        f"{_MODULE}:moe_align_block_size": "the JIT wrapper; reached through the bindings below",
        "sglang.kernels.ops.lora.moe.virtual_experts:jit_moe_align_block_size": "LoRA MoE (_align_block_size_jit), "
        "with map_invalid_experts_to_sentinel: another template variant",
    },
    extra_sites=[
        CallSite(
            module=_SRT_ALIGN, attr="moe_align_block_size", binds="caller", target=None, same_function=False,
            reached_by_serving=True,
            note="read from source (CUDA-only imports): imports this JIT wrapper inside the function and calls it "
            "when pad_expert_ids (sglang.srt.layers.quantization.gguf, CUDA, > 64 tokens with MMQ weights) or "
            "return_inactive_prefix_count (fused_marlin_moe, muse_spark fp4 MoE) is asked for, or with "
            "SGLANG_OPT_USE_JIT_KERNEL_MOE_ALIGN; otherwise sgl_kernel's AOT moe_align_block_size (the same "
            "algorithm) or, for <= 64 ids and > 64 buckets, moe_align_small_numel (Triton)",
        ),
        CallSite(
            module="sglang.kernels.ops.lora.moe.virtual_experts", attr="jit_moe_align_block_size",
            binds="entry_point", target=f"{_MODULE}.moe_align_block_size", same_function=True,
            reached_by_serving=True,
            note="LoRA MoE (_align_block_size_jit), with map_invalid_experts_to_sentinel: another template variant",
        ),
    ],
    notes=[
        "pinned variant: MoeAlignBlockSizeKernel<int32_t, false, false, true> (pad_expert_ids, as "
        "sglang.srt.layers.quantization.gguf calls it) with pad_sorted_token_ids=True; the fused-Marlin variant "
        "(write_inactive_prefix_count) leaves expert_ids past the last block unwritten and returns int32[2]",
        "three kernels by size: numel < 1024 and <= 64 buckets: one CTA, deterministic thread-strided order; "
        "<= 1024 buckets: align + count_and_sort with atomics (order within a bucket varies run to run); more: v2",
        "capacities: SGLang sizes sorted_token_ids numel*BS when numel < buckets (decode), else the bound used "
        "here for every case; the kernel reads the capacity from the tensor, so only padding length differs",
        "BS per case = BLOCK_SIZE_M of the fused_moe config SGLang picks on an H200 for that model/split/T",
    ],
)

