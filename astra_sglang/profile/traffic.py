"""Bytes an op's call moves in SGLang's forward, counted by the op's own contract at the dims the forward calls it
with (read from the model's ``config.json`` and the run's batch size, lengths and dtype).

A profiler trace holds kernel times, not tensor sizes. For a few ops the dims of SGLang's call follow from the
model config alone, so the contract's count (``harness.tensors.ArgSet.bytes_moved``'s rule: every signature tensor
read or written once, in-place ones both) gives the bytes per call without guessing:

- ``decode_attention`` (decode): B = batch, S = the context per request at the profiled step, NK = KV heads,
  G = query heads per KV head, D = head dim, MS = max_kv_splits, X = 0: only the batch's KV rows are read, the
  pool's other slots are not traffic.
- ``extend_attention`` (prefill): B = batch, L = input length, R = 0 (one_batch's prefill has no cached prefix),
  NK, G, D as above, X = 0.
- ``fused_add_rmsnorm``: T = tokens of the step (decode: batch; prefill: batch x input length), H = hidden size.
- ``silu_and_mul``: dense models only (a MoE model's experts call other kernels): T as above, H = intermediate size.

Anything else, a manifest whose dims are not those, a dtype of unknown size, an MLA model (its attention runs with
other dims) or tensor parallelism (per-rank dims not derived) gives no count: the column stays "-".
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from astra_sglang.contract.op import ManifestError, load_manifest
from astra_sglang.errors import AstraError
from astra_sglang.harness.shared.suite import contract_bytes

MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
DEFAULT_KV_SPLITS = 8  # SGLang's --triton-attention-num-kv-splits default
COVERED = ("decode_attention", "extend_attention", "fused_add_rmsnorm", "silu_and_mul")


def human_bytes(n: float) -> str:
    """``541.1 MB``: decimal units, as GB/s are."""
    if n < 1000:
        return f"{n:.0f} B"
    exp = min(3, int(math.log10(n)) // 3)
    return f"{n / 1000 ** exp:.1f} {('kB', 'MB', 'GB')[exp - 1]}"


@dataclass
class Traffic:
    """Bytes per call of the ops counted, the dims each was counted at, and what the counts rest on."""

    bytes_per_call: dict[str, int]  # op short name -> bytes one call moves
    dims: dict[str, dict[str, int]]  # op short name -> the contract dims of SGLang's call
    basis: str  # the config, phase, batch, lengths, dtype the dims come from (said in the hot list's note)
    not_counted: list[str] = field(default_factory=list)  # covered ops left out, with the reason


def load_config(path: Path) -> dict[str, Any]:
    """A model's ``config.json`` as a dict; AstraError (one line) for a missing or unreadable file."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise AstraError(f"cannot read model config {path}: {e.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise AstraError(f"model config {path} is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise AstraError(f"model config {path} is not a JSON object (a config.json)")
    return data


def model_dtype(config: dict[str, Any], requested: str | None = None) -> str:
    """The dtype SGLang runs the model in: ``--dtype`` when given (not ``auto``), else the config's
    ``torch_dtype``/``dtype``; float32 and a missing one run as bfloat16 (SGLang's ``auto``)."""
    if requested and requested != "auto":
        return {"half": "float16", "bf16": "bfloat16", "float": "float32"}.get(requested, requested)
    found = config.get("torch_dtype") or config.get("dtype")
    return found if found in ("float16", "bfloat16") else "bfloat16"


def _int(config: dict[str, Any], key: str) -> int | None:
    v = config.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def forward_dims(config: dict[str, Any], phase: str, batch_size: int, input_len: int, context: int,
                 max_kv_splits: int = DEFAULT_KV_SPLITS, tp_size: int = 1
                 ) -> tuple[dict[str, dict[str, int]], list[str]]:
    """The contract dims SGLang's ``phase`` forward calls each op with (the covered ones and, for a MoE model, the
    fused-MoE GEMMs), and why any of them has none."""
    dims: dict[str, dict[str, int]] = {}
    skipped: list[str] = []
    tokens = batch_size if phase == "decode" else batch_size * input_len
    hidden = _int(config, "hidden_size")
    if hidden:
        dims["fused_add_rmsnorm"] = {"T": tokens, "H": hidden}
    else:
        skipped.append("fused_add_rmsnorm: the config has no hidden_size")
    split = f"tensor parallel size {tp_size}: per-rank dims not derived"
    moe = [k for k in MOE_KEYS if k in config]
    inter = _int(config, "intermediate_size")
    if moe:
        skipped.append(f"silu_and_mul: a MoE model ({moe[0]}): its experts do not run the dense MLP")
    elif tp_size != 1:
        skipped.append(f"silu_and_mul: {split}")
    elif inter:
        dims["silu_and_mul"] = {"T": tokens, "H": inter}
    else:
        skipped.append("silu_and_mul: the config has no intermediate_size")
    attention = "decode_attention" if phase == "decode" else "extend_attention"
    heads = _int(config, "num_attention_heads")
    kv_heads = _int(config, "num_key_value_heads") or heads  # HF's default: multi-head attention
    head_dim = _int(config, "head_dim") or (hidden // heads if hidden and heads else None)
    if "kv_lora_rank" in config:
        skipped.append(f"{attention}: an MLA model (kv_lora_rank): its attention runs with other dims")
    elif tp_size != 1:
        skipped.append(f"{attention}: {split}")
    elif not (heads and kv_heads and head_dim) or heads % kv_heads:
        skipped.append(f"{attention}: the config's num_attention_heads / num_key_value_heads / head_dim do not "
                       "give whole query groups")
    elif phase == "decode":
        # P 1: SGLang's page size unless --page-size says otherwise (the rows read are the same either way);
        # R 1: one_batch's requests all have the same length; KX 0: the stale part of a graph replay's kv_indices
        # buffer is not read, so the count is the same either way
        dims[attention] = {"B": batch_size, "S": context, "NK": kv_heads, "G": heads // kv_heads, "D": head_dim,
                           "X": 0, "KX": 0, "MS": max_kv_splits, "P": 1, "R": 1}
    else:
        dims[attention] = {"B": batch_size, "L": input_len, "R": 0, "NK": kv_heads, "G": heads // kv_heads,
                           "D": head_dim, "X": 0}
    if moe:
        _moe_dims(config, moe[0], tokens, hidden, tp_size, dims, skipped)
    return dims, skipped


def calls_per_step(config: dict[str, Any], op: str, phase: str) -> int | None:
    """How many times one forward step calls ``op``, where the config says it for certain: attention once per
    layer (not in a model whose layers mix attention kinds), the fused-MoE GEMMs once per layer where every layer
    is sparse, the dense MLP's silu_and_mul once per layer. None otherwise: fused_add_rmsnorm's count depends on
    which of a layer's norms SGLang's layer communicator fuses, and a guess would forecast a wrong step."""
    layers = _int(config, "num_hidden_layers")
    if not layers:
        return None
    mixed = config.get("use_sliding_window") or config.get("full_attention_interval") or any(
        t != "full_attention" for t in config.get("layer_types") or [])
    if op in ("decode_attention", "extend_attention"):
        return None if mixed else layers
    if op in ("fused_moe_kernel", "fused_moe_down"):
        dense = config.get("mlp_only_layers") or config.get("first_k_dense_replace") or \
            (config.get("decoder_sparse_step") or 1) != 1 or (config.get("moe_layer_freq") or 1) != 1
        return None if dense else layers
    if op == "silu_and_mul" and not any(k in config for k in MOE_KEYS):
        return layers
    return None


def _moe_dims(config: dict[str, Any], experts_key: str, tokens: int, hidden: int | None, tp_size: int,
              dims: dict[str, dict[str, int]], skipped: list[str]) -> None:
    """The two fused-MoE GEMMs' dims as the patch adapter reads them from ``invoke_fused_moe_kernel``'s tensors
    (T tokens, TK top-k, E experts; w1: N = gate and up rows, K = hidden; w2: H = hidden, I = the expert's
    width). Not bytes: which experts a step touches follows the routing, so the profile does not count them."""
    experts, top_k = _int(config, experts_key), _int(config, "num_experts_per_tok")
    inter = _int(config, "moe_intermediate_size") or _int(config, "intermediate_size")
    if tp_size != 1:
        skipped.append(f"fused_moe_kernel, fused_moe_down: tensor parallel size {tp_size}: per-rank dims not derived")
    elif not (experts and top_k and inter and hidden):
        skipped.append("fused_moe_kernel, fused_moe_down: the config lacks one of num_experts_per_tok, "
                       "moe_intermediate_size / intermediate_size, hidden_size")
    else:
        dims["fused_moe_kernel"] = {"T": tokens, "TK": top_k, "E": experts, "N": 2 * inter, "K": hidden}
        dims["fused_moe_down"] = {"T": tokens, "TK": top_k, "E": experts, "H": hidden, "I": inter}


def count(extracted: Path, config: dict[str, Any], phase: str, batch_size: int, input_len: int, context: int,
          dtype: str, max_kv_splits: int = DEFAULT_KV_SPLITS, tp_size: int = 1, source: str = "config") -> Traffic:
    """Bytes per call of the covered ops in this forward, by each op's manifest under ``extracted``.

    ``context`` is the KV length per request at the profiled decode step (the prompt plus the tokens decoded
    before it, plus the one being decoded); ``source`` names the config in the note."""
    dims, skipped = forward_dims(config, phase, batch_size, input_len, context, max_kv_splits, tp_size)
    out: dict[str, int] = {}
    for op, d in dims.items():
        if op not in COVERED:  # dims without a byte count (the fused-MoE GEMMs: their bytes follow the routing)
            continue
        try:
            manifest = load_manifest(Path(extracted) / op)
        except ManifestError:
            skipped.append(f"{op}: no readable manifest under {extracted}")
            continue
        n = contract_bytes(manifest, d, dtype)
        if n is None:
            skipped.append(f"{op}: its contract's dims or dtypes are not {sorted(d)} / {dtype}")
        else:
            out[op] = n
    where = f"{phase} batch {batch_size}, " + (f"context {context} per request" if phase == "decode"
                                               else f"input {input_len}")
    basis = f"{source}, {where}, {dtype}" + (f", max_kv_splits {max_kv_splits}" if "decode_attention" in out else "")
    kept = [why for why in skipped if why.split(":")[0] in COVERED]  # not the MoE GEMMs': never counted here
    return Traffic(out, {op: dims[op] for op in out}, basis, kept)
