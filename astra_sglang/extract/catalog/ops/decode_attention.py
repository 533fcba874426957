"""decode_attention: SGLang's Triton split-KV decode attention ``decode_attention_fwd`` over a paged KV
pool, as the Triton attention backend calls it (CUDA-graph and eager kv_indices).
"""

from __future__ import annotations

import math

import torch

from astra_sglang.contract.op import CallSite, Dim, ScalarArg, ShapeCase, Signature, TensorArg
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import case, dedup, head_pairs

_MODULE = "sglang.kernels.ops.attention.decode_attention"

# Under CUDA graphs (every decode batch up to --cuda-graph-max-bs) TritonAttnBackend passes kv_indices as its whole
# cuda_graph_kv_indices buffer, max_num_tokens * context_len entries (triton_backend.py,
# _build_cuda_graph_forward_metadata); eager decode passes exactly the batch's rows. A kernel that sizes its work
# by kv_indices.numel() is served on the first form: LLaMA-3-8B (context 8192) at the H200's default decode graph
# batch (256 below 160 GB of GPU memory at TP < 4: arg_groups/memory_hook.py) gives 256 * 8192 entries (16 MB).
_GRAPH_KV_INDICES = 256 * 8192


def _graph_spare(b: int, s: int) -> int:
    """KX of the CUDA-graph form: the buffer's entries past the batch's B*S rows (the buffer holds at least those)."""
    return max(_GRAPH_KV_INDICES, b * s) - b * s


_UNIFORM, _RAGGED = 1, 2  # dim R: every request S KV rows / lengths mixed

# Uniform contexts as a forward serves them: one_batch's profiled decode step is its 9th, so a batch prefilled with
# 1024 tokens reads 1033 KV rows a request. A power of two there lines a split kernel's chunks up with the requests
# (132 chunks of 1024 rows at B128: every request one chunk, stage 2 merging nothing) and the bench timed a case
# serving never runs: 1.345x at B128 S1024 against 1.231x in the forward (H100, 2026-12-06).
_DECODED = 9


def _serving(tags: list[str], source: str, b: int, s: int, nk: int = 8, g: int = 4, d: int = 128, p: int = 1,
             r: int = _RAGGED, x: int = 1, graph: bool = True, qs: int = 1) -> ShapeCase:
    """One decode batch as the Triton backend serves it (LLaMA-3-8B TP1 heads unless said); ``graph``: kv_indices
    as a CUDA-graph replay passes it (the whole buffer), else exactly the batch's rows (eager decode); ``qs``: q
    as a view of the fused qkv rows (1, what LLaMA-style models pass) or contiguous (0)."""
    kind = "uniform" if r == _UNIFORM else "ragged"
    form = "graph buffer" if graph else "eager"
    layout = "q in qkv rows" if qs else "q contiguous"
    return case(tags, f"{source}: {b} requests, context {s} ({kind}), page {p}, kv_indices {form}, {layout}", B=b,
                S=s, NK=nk, G=g, D=d, P=p, R=r, X=x, KX=_graph_spare(b, s) if graph else 0, MS=MAX_KV_SPLITS, QS=qs)


def _decode_shapes() -> list[ShapeCase]:
    """The timed "paper" set (also tagged "decode"): the H200 profile's shapes as its forward serves them
    (uniform lengths of the prefill plus _DECODED, q in the qkv rows) and _serving mixes at GQA 4 and 8, KV heads
    8/4/2, page 1 and 16, each case's K and V rows at most ~1.1 GB; then wider "decode" coverage (checked, not
    timed by default; half with a contiguous q), edges and tiny CPU cases (both q layouts)."""
    paper, decode = ["paper", "decode"], ["decode"]
    u, n = _UNIFORM, _DECODED
    cases = [
        _serving(paper, "profile LLaMA-3-8B", 128, 1024 + n, r=u),
        _serving(paper, "profile LLaMA-3-8B", 32, 1024 + n, r=u),
        _serving(paper, "profile LLaMA-3-8B", 1, 1024 + n, r=u),
        _serving(paper, "profile LLaMA-3-8B", 1, 8192 + n, r=u),
        _serving(paper, "profile LLaMA-3-8B", 16, 8192 + n, r=u),
        _serving(paper, "profile LLaMA-3-8B", 32, 8192 + n, r=u),
        _serving(paper, "LLaMA-3-8B TP1", 128, 1024),
        _serving(paper, "LLaMA-3-8B TP1", 256, 1024),
        _serving(paper, "LLaMA-3-8B TP1, page 16", 64, 2048, p=16),
        _serving(paper, "LLaMA-3-8B TP1, page 16", 32, 8192 + n, p=16, r=u),
        _serving(paper, "LLaMA-3-70B TP1", 64, 4096, g=8),
        _serving(paper, "LLaMA-3-70B TP2", 8, 32768, nk=4, g=8),
        _serving(paper, "LLaMA-3-70B TP4", 128, 2048, nk=2, g=8),
        _serving(paper, "LLaMA-3-8B TP2, page 16", 256, 2048, nk=4, p=16),
        # Qwen3-30B-A3B (32 q heads, 4 KV heads: GQA 8), the MoE model of issue 25: at batch 128 its decode
        # attention is 22% of the H200 step at 58% of the copy ceiling, and no LLaMA shape above measures a patch
        # there, so no guard region may serve it (2026-12-07). q stays in the qkv rows: SGLang's CUDA path norms
        # q and k in place on their views (models/utils.apply_qk_norm, fused_inplace_qknorm) before the rope.
        _serving(paper, "profile Qwen3-30B-A3B", 128, 1024 + n, nk=4, g=8, r=u),
        _serving(paper, "profile Qwen3-30B-A3B", 32, 1024 + n, nk=4, g=8, r=u),
    ]
    wide = ((1, 32768), (8, 8192), (32, 2048), (64, 1024), (128, 512), (256, 512))
    pairs = [(nq, nk, src) for nq, nk, src in head_pairs() if nq // nk in (4, 7, 8)]  # GQA groups served
    for i, (nq, nk, src) in enumerate(pairs):
        b, s = wide[i % len(wide)]
        cases.append(_serving(decode, src, b, s, nk=nk, g=nq // nk, p=(1, 16)[i % 2], r=(_RAGGED, u)[i // 2 % 2],
                              graph=i % 3 != 2, qs=i // 3 % 2))
    cases += [
        _serving(["edge", "decode"], "edge: one request, one KV token", 1, 1, r=u),
        _serving(["edge", "decode"], "edge: eager decode (past --cuda-graph-max-bs)", 256, 1024, graph=False, qs=0),
        _serving(["edge", "decode"], "edge: eager decode, page 16", 200, 700, p=16, graph=False),
        _serving(["edge", "decode"], "edge: long context (32k), GQA 8", 4, 32768, g=8, p=16),
        _serving(["edge", "decode"], "edge: head_dim 64, MHA (LLaMA-2-7B TP4 heads)", 16, 700, nk=8, g=1, d=64,
                 qs=0),
        _serving(["edge", "decode"], "edge: MHA (LLaMA-2-7B TP4)", 64, 1024, nk=8, g=1, p=16, r=u),
        _serving(["edge", "decode"], "edge: head_dim 64, GQA 4 (LLaMA-3.2-1B)", 64, 1024, d=64),
        _serving(["edge", "decode"], "edge: head_dim 256, GQA 2 (Gemma-2-9B)", 32, 2048, nk=8, g=2, d=256, p=16,
                 qs=0),
        _serving(["edge", "decode"], "edge: page 64, odd context", 16, 3001, p=64),
        case(["test"], "CPU: GQA 2, mixed lengths, kv_indices with 7 stale entries, q in qkv rows", B=2, S=5, NK=1,
             G=2, D=16, P=1, R=_RAGGED, X=3, KX=7, MS=MAX_KV_SPLITS, QS=1),
        case(["test"], "CPU: MHA, mixed lengths, page 4", B=3, S=9, NK=2, G=1, D=16, P=4, R=_RAGGED, X=1, KX=0,
             MS=MAX_KV_SPLITS, QS=0),
        case(["test"], "CPU: one request, kv_indices with 40 stale entries", B=1, S=3, NK=1, G=1, D=16, P=1, R=u,
             X=1, KX=40, MS=MAX_KV_SPLITS, QS=0),
        case(["test"], "CPU: GQA 4, uniform 7, page 4 (last page partly filled), q in qkv rows", B=2, S=7, NK=1,
             G=4, D=16, P=4, R=u, X=2, KX=0, MS=MAX_KV_SPLITS, QS=1),
    ]
    return dedup(cases)


# ServerArgs (arg_groups/fields/exec_.py) triton_attention_num_kv_splits default on CUDA, and the H200's SMs
# (TritonAttnBackend.device_core_count): written into inputs.py, which plans the splits as SGLang does.

MAX_KV_SPLITS = 8
SMS = 132


def reference(**args):
    q, kb, vb = args["q"].double(), args["k_buffer"], args["v_buffer"]
    indptr, indices = args["kv_indptr"].long(), args["kv_indices"].long()
    nk = kb.shape[1]
    group = q.shape[1] // nk
    out = torch.empty_like(q)
    scale = torch.empty_like(q)
    for b in range(q.shape[0]):
        rows = indices[indptr[b]:indptr[b + 1]]
        k, v = kb[rows].double(), vb[rows].double()  # [L, NK, D]: only the request's rows, in float64
        qb = q[b].reshape(nk, group, -1)  # query head h = kv head h // G, h % G within the group
        p = torch.softmax(torch.einsum("kgd,lkd->kgl", qb, k) * float(args["sm_scale"]), dim=-1)
        out[b] = torch.einsum("kgl,lkd->kgd", p, v).reshape(out[b].shape)
        scale[b] = torch.einsum("kgl,lkd->kgd", p, v.abs()).reshape(out[b].shape)  # the size of the terms summed
    result = {"o": out, "o:scale": scale}
    for name in ("attn_logits", "attn_lse"):
        ws = args[name]
        result[name] = torch.zeros(ws.shape, dtype=ws.dtype, device=ws.device)
        result[name + ":segments"] = torch.full(ws.shape, -1, dtype=torch.int64, device=ws.device)
    return result


def kv_lengths(b, total, gen, device):
    """b lengths >= 1 adding up to total, in random order. Which lengths is fixed by (b, total): the expected
    sorted pieces of [0, total) cut at b - 1 uniform random points (the k-th smallest of b is total / b *
    (1/b + 1/(b-1) + ... + 1/(b-k+1))), rounded. Drawn cuts made a mixed shape's cost a draw of its own (the
    longest request sets the kernel's time): one kernel evaluated twice at B8 S32768 took 963 and 1197 us
    (H100, 2026-12-05). The order and the pages stay fresh for every input set."""
    lens, tail = [], 0.0
    for j in range(b, 0, -1):
        tail += 1.0 / j
        lens.append(max(1, round(total / b * tail)))
    i = b - 1
    while sum(lens) != total:  # rounding: the longest give or take one token each, in turn
        step = 1 if sum(lens) < total else -1
        if lens[i] + step >= 1:
            lens[i] += step
        i = (i - 1) % b
    order = torch.randperm(b, generator=gen, device=device)
    return torch.tensor(lens, dtype=torch.int64, device=device)[order]


def num_kv_splits(lens, num_head, num_kv_head, max_splits=MAX_KV_SPLITS, sms=SMS):
    """torch restatement of get_num_kv_splits_triton (kernels/ops/attention/metadata.py) as
    TritonAttnBackend.get_num_kv_splits launches it for a decode batch: num_group = 1, MAX_NUM_SEQ =
    max(256, next_power_of_2(batch)) lanes (every request is loaded), device_core_count = the SMs. The
    log2 and the core count are float32 like the kernel's, truncated to int32 as tl.cast does."""
    mx, mn = int(lens.max()), int(lens.min())
    if mx * 8 < mn * 10:
        mn = mx
    splits_1 = min(-(-mx // mn), max_splits)
    chunk_1 = -(-mx // splits_1)
    ext = torch.tensor(mx, dtype=torch.float32) / 64.0
    cores = int((sms * torch.clamp(torch.log2(ext), min=1.0)).to(torch.int32))
    group = num_head // num_kv_head
    grid = len(lens) * num_head if group == 1 else len(lens) * -(-num_head // min(16, group))
    splits_2 = min(-(-cores // grid), max_splits)
    chunk_2 = -(-mx // splits_2)
    return torch.maximum(-(-lens // chunk_1), -(-lens // chunk_2)).to(torch.int32)


def paged_indices(lens, page, pool, gen, device):
    """Token slots of every request, request after request: request b's tokens fill ceil(len_b / page) whole
    pages (slots page_id * page .. + page - 1 in order, the last page partly), its pages drawn at random among
    pages 1 .. pool // page - 1 (page 0 is SGLang's padding page); page 1 gives single random slots."""
    pages_per = -(-lens // page)
    avail = pool // page - 1
    pages = torch.randperm(avail, generator=gen, device=device)[: int(pages_per.sum())] + 1
    first_page = torch.cumsum(pages_per, 0) - pages_per  # request b's first page in `pages`
    start = torch.cumsum(lens, 0) - lens
    pos = torch.arange(int(lens.sum()), device=device) - torch.repeat_interleave(start, lens)
    page_of = torch.repeat_interleave(first_page, lens) + pos // page
    return (pages[page_of] * page + pos % page).to(torch.int64)


def make_inputs(dims, dtype, gen, device):
    b, s, nk, g, d, p, x = (dims[n] for n in ("B", "S", "NK", "G", "D", "P", "X"))
    if dims.get("R", 2) == 2 and b > 1:  # without R (dims written before it): mixed, as they were
        lens = kv_lengths(b, b * s, gen, device)
    else:
        lens = torch.full((b,), s, dtype=torch.int64, device=device)
    indptr = torch.zeros(b + 1, dtype=torch.int32, device=device)
    indptr[1:] = lens.cumsum(0).to(torch.int32)
    pool = b * s + (b + 1) * (p - 1) + x
    indices = paged_indices(lens, p, pool, gen, device)
    kx = dims.get("KX", 0)
    if kx:  # the CUDA-graph form: the whole pre-sized buffer, past the batch's slots stale ones of earlier batches
        stale = torch.randint(0, pool, (kx,), generator=gen, device=device, dtype=torch.int64)
        indices = torch.cat([indices, stale])
    dt = getattr(torch, dtype)
    q = torch.randn((b, nk * g, d), generator=gen, device=device).to(dt)
    k = torch.randn((pool, nk, d), generator=gen, device=device).to(dt)
    return {"q": q, "k_buffer": k, "kv_indptr": indptr, "kv_indices": indices,
            "num_kv_splits": num_kv_splits(lens, nk * g, nk, dims.get("MS", MAX_KV_SPLITS))}


def scalars(dims, dtype):
    return {"sm_scale": 1.0 / math.sqrt(dims["D"]), "max_kv_splits": dims["MS"], "page_size": dims["P"]}


REFERENCE = FileText(
    doc=(
        "Reference for decode_attention_fwd (astra-sglang, written): per request b and query head h, float64\n"
        "softmax(q[b, h] . K^T * sm_scale) V over the request's KV rows kv_indices[kv_indptr[b]:kv_indptr[b+1]], KV head\n"
        "h // (NQ // NK); page_size only says how those rows were laid out, not which are read.\n"
        "\n"
        "attn_logits / attn_lse are the kernel's split-KV workspace: stage 1 writes the partials of the splits\n"
        "num_kv_splits asks for, stage 2 reads them, and SGLang's decode path reads neither afterwards. They are not part\n"
        "of the function: ':segments' of -1 everywhere, so they are never compared (a candidate with another split plan,\n"
        "or none at all, passes on o alone)."
    ),
    imports=("import torch",),
    functions=(reference,),
)

INPUTS = FileText(
    doc="Structured inputs for decode_attention_fwd (astra-sglang, written): a decode batch over a paged KV pool.",
    imports=("import math", "", "import torch"),
    constants=("MAX_KV_SPLITS", "SMS"),
    functions=(kv_lengths, num_kv_splits, paged_indices, make_inputs, scalars),
)


ENTRY = CatalogEntry(
    short_name="decode_attention",
    op_id="attention.decode_attention_fwd",
    entry_point=f"{_MODULE}:decode_attention_fwd",
    kind="triton",
    signature=Signature(
        dims=[
            Dim(name="B", meaning="decode requests (one query token each)"),
            Dim(name="S", meaning="mean KV length per request (the batch reads B*S KV rows)"),
            Dim(name="NK", meaning="KV heads (after TP)"),
            Dim(name="G", meaning="query heads per KV head (NQ = NK * G); at most 16: the grouped stage 1 maps "
                "head tile i to KV head i // cdiv(G, 16), right only for G <= 16 or a multiple of 16 (a proposed "
                "test case at G = 17 found it, 2026-12-04)", max=16),
            Dim(name="D", meaning="head dim (qk and v)", multiple_of=16),
            Dim(name="P", meaning="page size (--page-size): a request's KV rows fill whole pages of P slots"),
            Dim(name="R", meaning="KV lengths: 1 = every request S (uniform), 2 = mixed (the expected pieces of B*S "
                                  "cut at B-1 random points, each >= 1, in random order)", max=2),
            Dim(name="X", meaning="pool slots beyond what the batch's pages can need (pool = B*S + (B+1)*(P-1) "
                "+ X; page 0 is padding)"),
            Dim(name="KX", meaning="kv_indices entries past the batch's B*S rows: 0 = eager decode (exactly the "
                "rows), else a CUDA-graph replay's whole cuda_graph_kv_indices buffer (stale slots past the rows)",
                min=0, max=1 << 22, added_default=0),
            Dim(name="MS", meaning="max_kv_splits (pinned: the server's triton_attention_num_kv_splits)",
                min=MAX_KV_SPLITS, max=MAX_KV_SPLITS),
            Dim(name="QS", meaning="q's layout: 0 = contiguous [B, NQ, D]; 1 = a view of the fused qkv projection's "
                "rows (row stride (NQ + 2 NK) * D; k and v sit in the gaps), as LLaMA-style attention passes it",
                min=0, max=1, added_default=0),
        ],
        tensors=[
            TensorArg(name="q", role="input", shape=["B", "NK*G", "D"], dtype="{dtype}", generated=True,
                      row_stride="NK*G*D+QS*2*NK*D"),
            TensorArg(name="k_buffer", role="input", shape=["B*S+(B+1)*(P-1)+X", "NK", "D"], dtype="{dtype}",
                      generated=True),
            TensorArg(name="v_buffer", role="input", shape=["B*S+(B+1)*(P-1)+X", "NK", "D"], dtype="{dtype}"),
            TensorArg(name="o", role="output", shape=["B", "NK*G", "D"], dtype="{dtype}"),
            TensorArg(name="kv_indptr", role="input", shape=["B+1"], dtype="int32", align_bytes=4, generated=True),
            TensorArg(name="kv_indices", role="input", shape=["B*S+KX"], moved=["B*S"], dtype="int64", align_bytes=8,
                      generated=True),
            # the kernel's split-KV workspace (stage 1 writes, stage 2 reads, the caller reads neither): outputs
            # by role, never compared (the reference gives them ':segments' of -1)
            TensorArg(name="attn_logits", role="output", shape=["B", "NK*G", "MS", "D"], dtype="float32"),
            TensorArg(name="attn_lse", role="output", shape=["B", "NK*G", "MS"], dtype="float32", align_bytes=4),
            TensorArg(name="num_kv_splits", role="input", shape=["B"], dtype="int32", align_bytes=4,
                      generated=True),
        ],
        scalars=[
            ScalarArg(name="max_kv_splits", type="int", default=MAX_KV_SPLITS, meaning="attn_logits.shape[2]"),
            ScalarArg(name="sm_scale", type="float", default=0.08838834764831845, meaning="1/sqrt(D)"),
            ScalarArg(name="page_size", type="int", default=1, meaning="P: TritonAttnBackend.page_size"),
        ],
        dtypes=["bfloat16", "float16"],
        relations=[
            "o[b, h] = softmax(q[b, h] . K_b^T * sm_scale) V_b, K_b/V_b = k_buffer/v_buffer[kv_indices[kv_indptr[b]:"
            "kv_indptr[b+1]], h // G]",
            "kv_indices are token slots; with page_size P a request's slots fill whole pages (slot // P its page, "
            "slot % P the token in it; the last page partly)",
            "1 <= num_kv_splits[b] <= max_kv_splits; k_scale = v_scale = 1.0 (bf16/fp16 KV cache)",
            "attn_logits / attn_lse: workspace, any content before and after the call",
        ],
        returns=[],
    ),
    reference=REFERENCE,
    inputs=INPUTS,
    inputs_scalars=True,
    shapes=_decode_shapes,
    call=["q", "k_buffer", "v_buffer", "o", "kv_indptr", "kv_indices", "attn_logits", "attn_lse", "num_kv_splits",
          "max_kv_splits", "sm_scale", "1.0", "1.0", "page_size=page_size"],
    wrapper=f"{_MODULE}:decode_attention_fwd",
    # what CUDA serving launches for the grouped (GQA) shapes, ~95% of the op's time: stage 2 and the MHA/Lean
    # kernels would multiply the sweep past its 64-config cap
    tuned_kernels=("_fwd_grouped_kernel_stage1",),
    callsite_modules=(_MODULE,),
    serving_sites={f"{_MODULE}:decode_attention_fwd": "the definition"},
    extra_sites=[
        CallSite(
            module="sglang.srt.layers.attention.triton_backend", attr="decode_attention_fwd", binds="caller",
            target=None, same_function=True, reached_by_serving=True,
            note="read from source: TritonAttnBackend.__init__ imports it lazily and keeps "
            "torch.compiler.disable(decode_attention_fwd) as self.decode_attention_fwd; forward_decode calls it "
            "for every decode batch with --attention-backend triton (kv_group_num == 1: the normal kernels, "
            "else the grouped ones), page_size=self.page_size; a REPLACE must rebind before the backend is built",
        ),
    ],
    notes=[
        "Triton kernels _fwd_kernel_stage1 (MHA) / _fwd_grouped_kernel_stage1 (GQA) on grid (B, heads, "
        "max_kv_splits) then _fwd_kernel_stage2 on (B, NQ); no logit cap, sinks, score_mod or Lean path (CUDA)",
        "page_size: on the 3-D pool the kernel's page-aware address (slot // P * P + slot % P rows) is the slot's "
        "row, so P changes the compiled variant and the layout of kv_indices (runs of P consecutive slots), not "
        "which rows are read",
        "not passed here though forward_decode passes them: use_pdl (True on sm_90: programmatic dependent "
        "launch between stage 1 and 2), uneven_batch (read on HIP only)",
        "attn_logits/attn_lse are workspace: the reference marks every element ':segments' -1 (never compared), "
        "so a candidate may split the KV differently or not use them",
    ],
)
