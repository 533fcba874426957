"""The moe_align_block_size contract (CUDA JIT, validated on the H200): what can be checked here on CPU.

The original cannot run without a GPU, so its reference is held against two restatements of what the kernel
writes: the single-CTA path's thread-strided order and the multi-block path's atomic (any) order within an
expert. Both must pass through the checker's segments; a token in the wrong expert, a wrong pad or a wrong
block owner must not. The routing generator must give what SGLang's top-k gives: distinct local ids per token.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import torch

from astra_sglang.checker import compare, compare_to_reference, segments_key
from astra_sglang.contract.op import load_manifest
from astra_sglang.extract import catalog
from astra_sglang.extract.extractor import write_op
from astra_sglang.harness.shared import suite
from astra_sglang.harness.shared.suite import shape_of
from astra_sglang.harness.shared.tensors import ArgSet
from astra_sglang.loader.launch import load_inputs

EXACT_NAMES = ("expert_ids", "num_tokens_post_pad")


@pytest.fixture(scope="module")
def op(tmp_path_factory: pytest.TempPathFactory) -> Path:
    entry = catalog.find("moe.moe_align_block_size")
    assert entry is not None
    return write_op(entry, tmp_path_factory.mktemp("moe")).path


def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem + "_moe_test", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _args(op: Path, dims: dict[str, int], seed: int) -> dict:
    m = load_manifest(op)
    a = ArgSet(m, dims, "int32", "cpu", load_inputs(op, m))
    a.fill("normal", torch.Generator().manual_seed(seed))
    return a.args()


def _kernel(args: dict, small_batch_order: bool, seed: int = 0) -> dict[str, torch.Tensor]:
    """What MoeAlignBlockSizeKernel<int32, false, false, true> writes, restated loop by loop."""
    ids = args["topk_ids"].reshape(-1).tolist()
    buckets, bs = args["num_experts"], args["block_size"]
    numel = len(ids)
    members: list[list[int]] = [[] for _ in range(buckets)]
    if small_batch_order:  # one CTA: thread t takes i = t, t + stride, ...; ranks prefix-summed over threads
        stride = max(buckets, 32)
        for t in range(stride):
            for i in range(t, numel, stride):
                members[ids[i] + 1].append(i)
    else:  # atomics: any order within a bucket
        gen = torch.Generator().manual_seed(seed)
        for i in torch.randperm(numel, generator=gen).tolist():
            members[ids[i] + 1].append(i)
    sorted_ids = [numel] * args["sorted_token_ids"].numel()
    expert_ids = [-1] * args["expert_ids"].numel()
    pos = 0
    for b, tokens in enumerate(members):
        sorted_ids[pos:pos + len(tokens)] = tokens
        run = -(-len(tokens) // bs) * bs
        for blk in range(pos // bs, (pos + run) // bs):
            expert_ids[blk] = b - 1
        pos += run
    return {"sorted_token_ids": torch.tensor(sorted_ids, dtype=torch.int32),
            "expert_ids": torch.tensor(expert_ids, dtype=torch.int32),
            "num_tokens_post_pad": torch.tensor([pos], dtype=torch.int32),
            "cumsum_buffer": torch.full_like(args["cumsum_buffer"], 12345)}


def _agrees(out: dict[str, torch.Tensor], ref: dict[str, torch.Tensor], tol) -> list[str]:
    bad = []
    for name, t in out.items():
        seg = ref.get(segments_key(name))
        if compare_to_reference(name, t, ref[name], tol, None, seg) is not None:
            bad.append(name)
    return bad


CASES = [
    {"T": 1, "K": 2, "E": 8, "EP": 1, "BS": 16},       # single-CTA path (Mixtral decode)
    {"T": 37, "K": 8, "E": 16, "EP": 8, "BS": 16},     # EP8: most ids are -1 (bucket 0)
    {"T": 300, "K": 8, "E": 256, "EP": 1, "BS": 64},   # DeepSeek-V3 TP8: multi-block path
    {"T": 5, "K": 5, "E": 1, "EP": 3, "BS": 8},        # invented: one local expert
]


@pytest.mark.parametrize("dims", CASES)
def test_reference_agrees_with_both_kernel_orders(op: Path, dims: dict[str, int]) -> None:
    m = load_manifest(op)
    tol = m.tolerances["int32"]
    reference = _module(op / "reference.py").reference
    args = _args(op, dims, seed=7)
    ref = reference(**args)
    small = dims["T"] * dims["K"] < 1024 and dims["E"] + 1 <= 64
    assert _agrees(_kernel(args, small_batch_order=small), ref, tol) == []
    one, other = _kernel(args, False, seed=1), _kernel(args, False, seed=2)
    assert _agrees(one, ref, tol) == []
    # two runs of the atomic path differ in place but are the same answer to the candidate check
    name = "sorted_token_ids"
    seg = ref[segments_key(name)]
    assert compare(name, one[name], other[name], ref[name], tol, None, seg) is None


def test_wrong_answers_are_rejected(op: Path) -> None:
    m = load_manifest(op)
    tol = m.tolerances["int32"]
    args = _args(op, CASES[2], seed=3)
    ref = _module(op / "reference.py").reference(**args)
    good = _kernel(args, False)
    ids = good["sorted_token_ids"]
    n = args["topk_ids"].numel()
    moved = ids.clone()
    seg = ref[segments_key("sorted_token_ids")]
    busy = torch.bincount(args["topk_ids"].reshape(-1).long() + 1).argsort(descending=True)[:2].tolist()
    a, b = (int((seg == k).nonzero()[0]) for k in busy)   # first slots of the two busiest experts
    assert int(moved[a]) < n and int(moved[b]) < n
    moved[a], moved[b] = ids[b], ids[a]                  # two tokens swapped between experts
    wrong_owner = good["expert_ids"].clone()
    wrong_owner[0] += 1
    for out in ({**good, "sorted_token_ids": moved}, {**good, "expert_ids": wrong_owner},
                {**good, "num_tokens_post_pad": good["num_tokens_post_pad"] + 16}):
        assert _agrees(out, ref, tol) != []


def test_routing_is_a_top_k_of_distinct_local_experts(op: Path) -> None:
    m = load_manifest(op)
    for dims in [*suite.test_shapes(m), *CASES]:
        args = _args(op, dims, seed=11)
        ids = args["topk_ids"]
        assert tuple(ids.shape) == shape_of(["T", "K"], dims) and ids.dtype == torch.int32
        assert int(ids.min()) >= -1 and int(ids.max()) < dims["E"]
        for row in ids.tolist():
            real = [i for i in row if i >= 0]
            assert len(real) == len(set(real))
        assert args["num_experts"] == dims["E"] + 1 and args["block_size"] == dims["BS"]
    hot = _args(op, {"T": 512, "K": 8, "E": 128, "EP": 1, "BS": 64}, seed=5)["topk_ids"]
    counts = torch.bincount(hot.reshape(-1), minlength=128)
    assert int(counts.max()) > 3 * float(counts.float().mean())  # skewed like real routing, not uniform


def test_every_manifest_shape_has_capacity_for_its_routing(op: Path) -> None:
    """The declared capacity is SGLang's bound: the reference's padded total must fit in every shape."""
    m = load_manifest(op)
    reference = _module(op / "reference.py").reference
    for s in m.shapes[:8]:
        args = _args(op, s.dims, seed=1)
        ref = reference(**args)
        assert int(ref["num_tokens_post_pad"][0]) <= args["sorted_token_ids"].numel()
