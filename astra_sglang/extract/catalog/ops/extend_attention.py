"""extend_attention: SGLang's Triton extend (prefill) attention ``extend_attention_fwd``: a chunk of new
tokens attending to their cached prefix and, causally, to each other.
"""

from __future__ import annotations

import math

import torch

from astra_sglang.contract.op import CallSite, Dim, ScalarArg, ShapeCase, Signature, TensorArg
from astra_sglang.extract.catalog.base import CatalogEntry
from astra_sglang.extract.catalog.source_text import FileText
from astra_sglang.extract.shapes import case, dedup, head_pairs

_EXTEND_MODULE = "sglang.kernels.ops.attention.extend_attention"


def _extend_shapes() -> list[ShapeCase]:
    batches = ((1, 4096, 0), (2, 2048, 2048), (4, 1024, 3072), (8, 512, 512), (16, 256, 1024), (4, 2048, 8192))
    cases = []
    for i, (nq, nk, src) in enumerate(head_pairs()):
        b, l_, r = batches[i % len(batches)]
        cases.append(case(["prefill"], f"{src}: {b} requests, {l_} new tokens each on average, prefix {r}",
                          B=b, L=l_, R=max(r, 1), NK=nk, G=nq // nk, D=128, X=256))
    cases += [
        case(["edge", "prefill"], "edge: one new token over a prefix (chunked-prefill tail)", B=1, L=1, R=500,
             NK=8, G=4, D=128, X=16),
        case(["edge", "prefill"], "edge: odd lengths, head_dim 64, MHA", B=5, L=77, R=33, NK=4, G=1, D=64, X=9),
        case(["test"], "CPU: GQA 2, two requests", B=2, L=5, R=3, NK=1, G=2, D=16, X=2),
        case(["test"], "CPU: MHA, three requests", B=3, L=3, R=2, NK=2, G=1, D=32, X=1),
        case(["test"], "CPU: one token, one request", B=1, L=1, R=1, NK=1, G=1, D=16, X=1),
    ]
    return dedup(cases)


def reference(**args):
    q, ke, ve = args["q_extend"].double(), args["k_extend"].double(), args["v_extend"].double()
    kb, vb = args["k_buffer"].double(), args["v_buffer"].double()
    qo, kv, indices = args["qo_indptr"].long(), args["kv_indptr"].long(), args["kv_indices"].long()
    group = q.shape[1] // ke.shape[1]
    out, scale = torch.empty_like(q), torch.empty_like(q)
    for b in range(qo.numel() - 1):
        rows = indices[kv[b]:kv[b + 1]]
        lo, hi = int(qo[b]), int(qo[b + 1])
        k = torch.cat((kb[rows], ke[lo:hi])).repeat_interleave(group, dim=1)  # [P + E, NQ, D]
        v = torch.cat((vb[rows], ve[lo:hi])).repeat_interleave(group, dim=1)
        n_pre, n_ext = rows.numel(), hi - lo
        visible = torch.ones(n_ext, n_pre + n_ext, dtype=torch.bool, device=q.device)
        visible[:, n_pre:] = torch.ones(n_ext, n_ext, dtype=torch.bool, device=q.device).tril()
        logits = torch.einsum("ihd,lhd->hil", q[lo:hi], k) * float(args["sm_scale"])
        p = torch.softmax(logits.masked_fill(~visible, float("-inf")), dim=-1)
        out[lo:hi] = torch.einsum("hil,lhd->ihd", p, v)
        scale[lo:hi] = torch.einsum("hil,lhd->ihd", p, v.abs())
    return {"o_extend": out, "o_extend:scale": scale}


def extend_lengths(b, mean):
    lens = [mean + mean // 2 if i % 2 == 0 else mean - mean // 2 for i in range(b)]
    if b % 2:
        lens[-1] = mean
    return lens


def make_inputs(dims, dtype, gen, device):
    b, l_, r, nk, g, d, x = (dims[n] for n in ("B", "L", "R", "NK", "G", "D", "X"))
    lens = torch.tensor(extend_lengths(b, l_), dtype=torch.int64, device=device)
    lens = lens[torch.randperm(b, generator=gen, device=device)]
    qo = torch.zeros(b + 1, dtype=torch.int32, device=device)
    qo[1:] = lens.cumsum(0).to(torch.int32)
    cuts = torch.randint(0, b * r + 1, (b - 1,), generator=gen, device=device).sort().values
    kv = torch.cat([torch.zeros(1, dtype=torch.int64, device=device), cuts,
                    torch.full((1,), b * r, dtype=torch.int64, device=device)]).to(torch.int32)
    pool = b * r + x
    indices = (torch.randperm(pool - 1, generator=gen, device=device) + 1)[: b * r].to(torch.int64)
    dt = getattr(torch, dtype)
    return {"q_extend": torch.randn((b * l_, nk * g, d), generator=gen, device=device).to(dt),
            "k_extend": torch.randn((b * l_, nk, d), generator=gen, device=device).to(dt),
            "k_buffer": torch.randn((pool, nk, d), generator=gen, device=device).to(dt),
            "qo_indptr": qo, "kv_indptr": kv, "kv_indices": indices}


def scalars(dims, dtype):
    return {"sm_scale": 1.0 / math.sqrt(dims["D"]), "max_len_extend": max(extend_lengths(dims["B"], dims["L"]))}


REFERENCE = FileText(
    doc=(
        "Reference for extend_attention_fwd (astra-sglang, written; causal, no custom mask, page size 1): query i\n"
        "of request b (rows qo_indptr[b]..) attends to all of its cached prefix k_buffer[kv_indices[kv_indptr[b]:\n"
        "kv_indptr[b+1]]] and to its own new tokens j <= i (k_extend rows qo_indptr[b] + j), float64, KV head h // G."
    ),
    imports=("import torch",),
    functions=(reference,),
)

INPUTS = FileText(
    doc="Structured inputs for extend_attention_fwd (astra-sglang, written): a prefill batch of mixed lengths.",
    imports=("import math", "", "import torch"),
    functions=(extend_lengths, make_inputs, scalars),
)


ENTRY = CatalogEntry(
    short_name="extend_attention",
    op_id="attention.extend_attention_fwd",
    entry_point=f"{_EXTEND_MODULE}:extend_attention_fwd",
    kind="triton",
    signature=Signature(
        dims=[
            Dim(name="B", meaning="requests"),
            Dim(name="L", meaning="mean new (extend) tokens per request; the batch has B*L, lengths mixed"),
            Dim(name="R", meaning="mean cached prefix per request; the prefixes hold B*R KV rows, lengths >= 0"),
            Dim(name="NK", meaning="KV heads (after TP)"),
            Dim(name="G", meaning="query heads per KV head (NQ = NK * G)"),
            Dim(name="D", meaning="head dim (qk and v)", multiple_of=16),
            Dim(name="X", meaning="KV pool slots beyond the prefixes' (slot 0 is padding)"),
        ],
        tensors=[
            TensorArg(name="q_extend", role="input", shape=["B*L", "NK*G", "D"], dtype="{dtype}", generated=True),
            TensorArg(name="k_extend", role="input", shape=["B*L", "NK", "D"], dtype="{dtype}", generated=True),
            TensorArg(name="v_extend", role="input", shape=["B*L", "NK", "D"], dtype="{dtype}"),
            TensorArg(name="o_extend", role="output", shape=["B*L", "NK*G", "D"], dtype="{dtype}"),
            TensorArg(name="k_buffer", role="input", shape=["B*R+X", "NK", "D"], dtype="{dtype}", generated=True),
            TensorArg(name="v_buffer", role="input", shape=["B*R+X", "NK", "D"], dtype="{dtype}"),
            TensorArg(name="qo_indptr", role="input", shape=["B+1"], dtype="int32", align_bytes=4, generated=True),
            TensorArg(name="kv_indptr", role="input", shape=["B+1"], dtype="int32", align_bytes=4, generated=True),
            TensorArg(name="kv_indices", role="input", shape=["B*R"], dtype="int64", align_bytes=8,
                      generated=True),
        ],
        scalars=[
            ScalarArg(name="max_len_extend", type="int", default=1, meaning="max over requests of the new tokens"),
            ScalarArg(name="sm_scale", type="float", default=0.08838834764831845, meaning="1/sqrt(D)"),
        ],
        dtypes=["bfloat16", "float16"],
        relations=[
            "o_extend[qo_indptr[b] + i, h] = softmax over (prefix rows of b, all visible) + (new tokens j <= i) of "
            "q . k * sm_scale, times the matching v; KV head h // G",
            "custom_mask None, is_causal True, mask_indptr None, k_scale = v_scale = 1.0, page_size 1",
        ],
        returns=[],
    ),
    reference=REFERENCE,
    inputs=INPUTS,
    inputs_scalars=True,
    shapes=_extend_shapes,
    call=["q_extend", "k_extend", "v_extend", "o_extend", "k_buffer", "v_buffer", "qo_indptr", "kv_indptr",
          "kv_indices", "None", "True", "None", "max_len_extend", "1.0", "1.0", "sm_scale"],
    wrapper=f"{_EXTEND_MODULE}:extend_attention_fwd",
    callsite_modules=(_EXTEND_MODULE,),
    serving_sites={f"{_EXTEND_MODULE}:extend_attention_fwd": "the definition"},
    extra_sites=[
        CallSite(
            module="sglang.srt.layers.attention.triton_backend", attr="extend_attention_fwd", binds="caller",
            target=None, same_function=True, reached_by_serving=True,
            note="read from source: kept as torch.compiler.disable(extend_attention_fwd) in TritonAttnBackend; "
            "forward_extend (_forward_extend_kernel) for every prefill/extend batch with --attention-backend "
            "triton (paged prefix via kv_indices, causal); also the MHA chunked-prefix paths (dense prefix, "
            "identity_kv_indices=True, lse_extend)",
        ),
    ],
    notes=["Triton kernel _fwd_kernel (prefix stage then causal extend stage) on grid (B, NQ, "
           "cdiv(max_len_extend, BLOCK_M)); the kernel reads new K/V from k_extend/v_extend, not from the pool"],
)
